// Column arithmetic of the fused QKV buffer with query groups (ops.h, attention_forward): the
// group-major layout [s, b, G * (n + 2) * d] with n = heads / G query heads per group, each
// group holding its n queries, then its key, then its value (d columns each).
// e.g. heads 4, G 2, d 8: row width 64; query head 3 = group 1, slot 1: columns [40, 48);
// key of group 1: [48, 56); value of group 1: [56, 64).
#pragma once

#include <cstdint>

#include "core/error.h"

namespace megatron::backend {

struct QkvLayout {
  int64_t heads = 0, groups = 0, head_dim = 0;

  QkvLayout(int64_t heads_, int64_t groups_, int64_t head_dim_)
      : heads(heads_), groups(groups_ > 0 ? groups_ : heads_), head_dim(head_dim_) {
    MT_CHECK(heads > 0 && head_dim > 0 && groups > 0 && heads % groups == 0)
        << "qkv layout: " << heads << " heads in " << groups << " query groups of head_dim " << head_dim
        << " (heads must be a positive multiple of the groups)";
  }
  int64_t per_group() const { return heads / groups; }                  // n
  int64_t group_width() const { return (per_group() + 2) * head_dim; }  // (n + 2) * d
  int64_t width() const { return groups * group_width(); }              // columns of one qkv row
  int64_t group_of(int64_t head) const { return head / per_group(); }
  // First column of query head `head`, of the key and of the value of group `g`.
  int64_t q_col(int64_t head) const { return group_of(head) * group_width() + (head % per_group()) * head_dim; }
  int64_t k_col(int64_t g) const { return g * group_width() + per_group() * head_dim; }
  int64_t v_col(int64_t g) const { return k_col(g) + head_dim; }
};

}  // namespace megatron::backend
