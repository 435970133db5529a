#pragma once
// A device is a small value: its type and index (cpu, cuda:0, ...).
#include <cstdint>
#include <string>

namespace mvgpt {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  friend bool operator==(const Device&, const Device&) = default;

  std::string str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }
  // Parses "cpu", "cuda", "cuda:1"; throws std::invalid_argument naming the text otherwise.
  static Device parse(const std::string& text);
};

}  // namespace mvgpt
