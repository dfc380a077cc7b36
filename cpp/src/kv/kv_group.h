// The KV cache's two layer groups, each with its own page pool and page tables (kv_cache.h):
// Full holds the full-attention layers, Window the sliding-window layers (Gemma 3's local
// layers), whose pages can be returned once they fall out of the window.
#pragma once
#include <array>

namespace edgellm {

enum class KvGroup { Full = 0, Window = 1 };

// Every group, in index order: `for (KvGroup g : kKvGroups)`.
inline constexpr std::array<KvGroup, 2> kKvGroups = {KvGroup::Full, KvGroup::Window};

constexpr int kv_group_index(KvGroup g) { return static_cast<int>(g); }
constexpr KvGroup other_group(KvGroup g) { return g == KvGroup::Full ? KvGroup::Window : KvGroup::Full; }

// One value per group, indexed by KvGroup.
template <class T>
struct PerKvGroup {
  std::array<T, kKvGroups.size()> v{};
  T& operator[](KvGroup g) { return v[kv_group_index(g)]; }
  const T& operator[](KvGroup g) const { return v[kv_group_index(g)]; }
};

}  // namespace edgellm
