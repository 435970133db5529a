// The host arena (NOTE [ Host arena ] in tensor/host_arena.h): pieces are consecutive and aligned,
// a large request gets a chunk of its own, a piece keeps its chunk alive after the arena is gone, and
// a chunk is reused from its start only once every piece of it is gone.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <mvgpt/tensor/host_arena.h>

namespace mvgpt {
namespace {

const std::byte* at(const std::shared_ptr<Storage>& s) { return static_cast<const std::byte*>(s->data()); }

TEST(HostArena, PiecesFollowEachOtherAligned) {
  HostArena arena;
  auto a = arena.storage(100), b = arena.storage(64), c = arena.storage(1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(at(a)) % HostArena::kHugePage, 0u);  // a new chunk's start
  EXPECT_EQ(at(b), at(a) + 128);  // 100 bytes rounded up to 64
  EXPECT_EQ(at(c), at(b) + 64);
  EXPECT_EQ(a->nbytes(), 100u);
  EXPECT_TRUE(a->device().is_cpu());
}

TEST(HostArena, ALargeRequestGetsAChunkOfItsOwn) {
  HostArena arena;
  auto small = arena.storage(64);
  auto big = arena.storage(HostArena::kChunk + 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(at(big)) % HostArena::kHugePage, 0u);
  EXPECT_NE(at(big), at(small) + 64);
  std::memset(big->data(), 1, big->nbytes());  // all of it is there
  auto after = arena.storage(8);  // the big chunk has room left (rounded up to 2 MB)
  EXPECT_EQ(at(after), at(big) + (HostArena::kChunk + 64));
}

TEST(HostArena, APieceOutlivesTheArena) {
  std::shared_ptr<Storage> kept;
  {
    HostArena arena;
    kept = arena.storage(4096);
    std::memset(kept->data(), 0x5a, 4096);
  }
  HostArena other;
  auto fresh = other.storage(4096);
  std::memset(fresh->data(), 0, 4096);
  const std::vector<std::byte> want(4096, std::byte{0x5a});
  EXPECT_EQ(std::memcmp(kept->data(), want.data(), 4096), 0);
}

TEST(HostArena, AChunkStartsOverOnlyWhenAllItsPiecesAreGone) {
  HostArena arena;
  auto a = arena.storage(256);
  const std::byte* first = at(a);
  auto b = arena.storage(256);
  a.reset();  // b still lives: no rewinding
  EXPECT_EQ(at(arena.storage(64)), first + 512);
  b.reset();
  EXPECT_EQ(at(arena.storage(64)), first);
}

}  // namespace
}  // namespace mvgpt
