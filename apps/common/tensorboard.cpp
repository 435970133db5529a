#include "apps/common/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace mvgpt::apps {

namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

// Protobuf wire format: varints, and (field << 3 | wire type) keys.
void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(char(v | 0x80));
    v >>= 7;
  }
  s.push_back(char(v));
}
void put_key(std::string& s, int field, int wire_type) { put_varint(s, uint64_t(field) << 3 | uint64_t(wire_type)); }
void put_bytes(std::string& s, int field, std::string_view bytes) {
  put_key(s, field, 2);
  put_varint(s, bytes.size());
  s.append(bytes);
}
template <typename T>
void put_fixed(std::string& s, int field, T v) {
  put_key(s, field, sizeof(T) == 8 ? 1 : 5);
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
std::string event(double wall_time, int64_t step, std::string_view file_version, std::string_view summary) {
  std::string e;
  put_fixed(e, 1, wall_time);
  put_key(e, 2, 0);
  put_varint(e, uint64_t(step));
  if (!file_version.empty()) put_bytes(e, 3, file_version);
  if (!summary.empty()) put_bytes(e, 5, summary);
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  path_ = dir + "/events.out.tfevents." + std::to_string(int64_t(now_seconds())) + "." + host;
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error("TensorBoardWriter: cannot open " + path_ + " for writing");
  write_record(event(now_seconds(), 0, "brain.Event:2", {}));
  flush();
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, int64_t step) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string value_msg;
  put_bytes(value_msg, 1, tag);
  put_fixed(value_msg, 2, float(value));
  std::string summary;
  put_bytes(summary, 1, value_msg);
  write_record(event(now_seconds(), step, {}, summary));
}

void TensorBoardWriter::add_text(std::string_view tag, std::string_view markdown, int64_t step) {
  // Value { tag = 1; TensorProto tensor = 8; SummaryMetadata metadata = 9; }
  // TensorProto { DataType dtype = 1 (DT_STRING = 7); repeated bytes string_val = 8; } (no shape: a scalar)
  // SummaryMetadata { PluginData plugin_data = 1 { string plugin_name = 1; } }
  std::string tensor;
  put_key(tensor, 1, 0);
  put_varint(tensor, 7);
  put_bytes(tensor, 8, markdown);
  std::string plugin;
  put_bytes(plugin, 1, "text");
  std::string metadata;
  put_bytes(metadata, 1, plugin);
  std::string value_msg;
  put_bytes(value_msg, 1, tag);
  put_bytes(value_msg, 8, tensor);
  put_bytes(value_msg, 9, metadata);
  std::string summary;
  put_bytes(summary, 1, value_msg);
  write_record(event(now_seconds(), step, {}, summary));
}

void TensorBoardWriter::flush() {
  out_.flush();
  if (!out_) throw_write_error();
}

void TensorBoardWriter::throw_write_error() const {
  // The stream keeps no errno of its own; the last failed write's is still there.
  throw std::runtime_error("cannot write TensorBoard events to " + path_ + ": " + std::strerror(errno) +
                           "; free space there, or move the run folder (--out) to another disk");
}

void TensorBoardWriter::write_record(const std::string& bytes) {
  // TFRecord: uint64 length, masked crc of the length, data, masked crc of the data.
  uint64_t len = bytes.size();
  uint32_t len_crc = masked_crc32c(&len, sizeof(len));
  uint32_t data_crc = masked_crc32c(bytes.data(), bytes.size());
  out_.write(reinterpret_cast<const char*>(&len), sizeof(len));
  out_.write(reinterpret_cast<const char*>(&len_crc), sizeof(len_crc));
  out_.write(bytes.data(), std::streamsize(bytes.size()));
  out_.write(reinterpret_cast<const char*>(&data_crc), sizeof(data_crc));
  if (!out_) throw_write_error();
}

namespace {

struct Reader {
  std::string_view s;
  size_t pos = 0;
  const std::string& path;
  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error("read_scalar_events: " + path + ": malformed event (" + what + ")");
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= s.size()) fail("truncated varint");
      uint8_t b = uint8_t(s[pos++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint too long");
  }
  std::string_view bytes(size_t n) {
    if (pos + n > s.size()) fail("truncated field");
    std::string_view out = s.substr(pos, n);
    pos += n;
    return out;
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0: varint(); break;
      case 1: bytes(8); break;
      case 2: bytes(varint()); break;
      case 5: bytes(4); break;
      default: fail("unknown wire type");
    }
  }
};

}  // namespace

std::vector<ScalarEvent> read_scalar_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("read_scalar_events: cannot open " + path);
  std::vector<char> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<ScalarEvent> out;
  size_t pos = 0;
  while (pos < buf.size()) {
    if (pos + 12 > buf.size()) throw std::runtime_error("read_scalar_events: " + path + ": truncated record header");
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, &buf[pos], 8);
    std::memcpy(&len_crc, &buf[pos + 8], 4);
    if (len_crc != masked_crc32c(&len, 8)) throw std::runtime_error("read_scalar_events: " + path + ": bad length CRC");
    if (pos + 12 + len + 4 > buf.size()) throw std::runtime_error("read_scalar_events: " + path + ": truncated record");
    std::string_view data(&buf[pos + 12], len);
    std::memcpy(&data_crc, &buf[pos + 12 + len], 4);
    if (data_crc != masked_crc32c(data.data(), data.size()))
      throw std::runtime_error("read_scalar_events: " + path + ": bad data CRC");
    pos += 12 + len + 4;

    Reader ev{data, 0, path};
    int64_t step = 0;
    std::vector<std::pair<std::string, float>> values;
    while (ev.pos < data.size()) {
      uint64_t key = ev.varint();
      int field = int(key >> 3), wt = int(key & 7);
      if (field == 2 && wt == 0) {
        step = int64_t(ev.varint());
      } else if (field == 5 && wt == 2) {
        Reader summary{ev.bytes(ev.varint()), 0, path};
        while (summary.pos < summary.s.size()) {
          uint64_t skey = summary.varint();
          if ((skey >> 3) != 1 || (skey & 7) != 2) {
            summary.skip(int(skey & 7));
            continue;
          }
          Reader value{summary.bytes(summary.varint()), 0, path};
          std::string tag;
          float v = 0;
          bool simple = false;
          while (value.pos < value.s.size()) {
            uint64_t vkey = value.varint();
            if (vkey == ((1 << 3) | 2)) {
              tag = std::string(value.bytes(value.varint()));
            } else if (vkey == ((2 << 3) | 5)) {
              std::memcpy(&v, value.bytes(4).data(), 4);
              simple = true;
            } else {
              value.skip(int(vkey & 7));
            }
          }
          if (simple) values.emplace_back(tag, v);
        }
      } else {
        ev.skip(wt);
      }
    }
    for (auto& [tag, v] : values) out.push_back({tag, v, step});
  }
  return out;
}

}  // namespace mvgpt::apps
