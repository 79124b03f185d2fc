// TensorBoard event files written natively: no TensorFlow, no protobuf library.
//
// Mirrors what torch.utils.tensorboard.SummaryWriter.add_scalar (Megatron's --tensorboard-dir
// writer) puts on disk, so `tensorboard --logdir DIR` and EventAccumulator read our files.
//
// File: <dir>/events.out.tfevents.<%010d unix seconds>.<hostname>.<pid>.<n>, the name
// TensorBoard's EventFileWriter uses (pid and a per-process counter keep two writers started
// in the same second apart; TensorBoard only needs "tfevents" in the name).
//
// Format: a sequence of TFRecords (tensorflow/core/lib/io/record_writer.cc), little-endian:
//   uint64 length | uint32 masked_crc32c(the 8 length bytes) | data[length] | uint32 masked_crc32c(data)
// (masking: core/crc32c.h). Each `data` is one serialized `Event` protobuf. The first record
// is Event{wall_time, file_version = "brain.Event:2"} (with a version >= 2, TensorBoard's
// EventAccumulator purges only on a SessionLog START, not on a step going backwards, so the
// interleaved iteration / "vs samples" steps Megatron writes survive); each scalar is
// Event{wall_time, step, summary = Summary{value = [Value{tag, simple_value}]}}.
//
// Field numbers, confirmed in tensorflow/tensorboard tensorboard/compat/proto/event.proto and
// summary.proto (proto3):
//   Event:          double wall_time = 1 (fixed64, key 0x09); int64 step = 2 (varint, 0x10);
//                   oneof what { string file_version = 3 (0x1a); bytes graph_def = 4;
//                   Summary summary = 5 (length-delimited, 0x2a); ... }
//   Summary:        repeated Value value = 1 (0x0a)
//   Summary.Value:  string tag = 1 (0x0a); oneof value { float simple_value = 2 (fixed32, 0x15); ... }
// Keys are (field_number << 3) | wire_type. As in proto3's own serializer, a zero step is
// omitted (proto3 default) and fields are written in field-number order.
//
// Not thread-safe: one writer per rank, used from the training loop (Megatron writes only on
// the last rank).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace megatron::obs {

// Megatron's --tensorboard-queue-size default.
constexpr int64_t kDefaultTensorBoardQueueSize = 1000;

class TensorBoardWriter {
 public:
  // Creates `dir` (and parents) and a new event file in it, and writes + flushes the
  // file_version record. Throws megatron::Error naming the directory or file on failure.
  // `queue_size` (>= 1) events are buffered in memory before they are written out.
  explicit TensorBoardWriter(const std::string& dir, int64_t queue_size = kDefaultTensorBoardQueueSize);
  // Flushes pending events; an error here is printed to stderr, never thrown.
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Queues Event{wall_time = now, step, Summary{Value{tag, simple_value = float(value)}}}.
  // Like SummaryWriter, the value is stored as float32 (simple_value). Once `queue_size`
  // events are pending they are written and flushed. Throws megatron::Error on a write error.
  void add_scalar(const std::string& tag, double value, int64_t step);
  // Same with an explicit wall time (seconds since the epoch), for reproducible files.
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);

  // Writes every pending event to the file and flushes it to the OS.
  void flush();

  const std::string& path() const { return path_; }
  int64_t pending() const { return pending_count_; }

 private:
  void write_all(std::string_view bytes);

  std::string path_;
  int fd_ = -1;
  int64_t queue_size_;
  std::string pending_;  // framed records not yet written
  int64_t pending_count_ = 0;
};

// The encoders, exposed for tests (tests/obs/tensorboard_writer_test.cpp checks them
// against bytes produced by python-protobuf).
namespace tensorboard {

// Serialized Event{wall_time, file_version}.
std::string encode_file_version_event(double wall_time, std::string_view file_version = "brain.Event:2");
// Serialized Event{wall_time, step, summary{value{tag, simple_value}}}.
std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float simple_value);
// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
std::string frame_record(std::string_view data);

}  // namespace tensorboard

}  // namespace megatron::obs
