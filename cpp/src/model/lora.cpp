#include "model/lora.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "common/errors.h"
#include "model/architecture.h"
#include "kernels/lora_kernels.h"
#include "quant/quant.h"

namespace edgellm {
namespace {

constexpr const char* kSuffixA = ".lora_a";
constexpr const char* kSuffixB = ".lora_b";

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// 64-bit words at a time: an adapter of tens of MB hashes in milliseconds.
uint64_t hash_bytes(uint64_t h, const uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    h = mix(h, v);
  }
  for (; i < n; ++i) h = mix(h, p[i]);
  return mix(h, n);
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

std::shared_ptr<LoraAdapter> LoraAdapter::load(const std::string& path, const std::string& arch, const ModelConfig& c,
                                               const std::vector<LayerWeights>& layers) {
  auto ad = std::make_shared<LoraAdapter>();
  ad->file_ = GgufFile::open(path);  // ModelFormatError for anything that is not a valid GGUF
  const GgufFile& f = *ad->file_;
  const auto general_type = f.find_string("general.type");
  const auto adapter_type = f.find_string("adapter.type");
  if (!general_type || *general_type != "adapter" || !adapter_type || *adapter_type != "lora")
    throw ModelFormatError(path + ": not a LoRA adapter (general.type = \"" + general_type.value_or("") +
                           "\", adapter.type = \"" + adapter_type.value_or("") +
                           "\"; expected \"adapter\" and \"lora\", as convert_lora_to_gguf.py writes)");
  const auto file_arch = f.find_string("general.architecture");
  if (!file_arch || *file_arch != arch)
    throw ModelFormatError(path + ": adapter is for architecture \"" + file_arch.value_or("") +
                           "\", the base model is \"" + arch + "\"");
  ad->alpha_ = f.find_f32("adapter.lora.alpha").value_or(0.0f);
  if (!std::isfinite(ad->alpha_) || ad->alpha_ < 0)
    throw ModelFormatError(path + ": adapter.lora.alpha = " + std::to_string(ad->alpha_) + " is not a finite value >= 0");

  // Every tensor must be half of a pair over a base matrix; collect the halves by base name.
  std::set<std::string> unused;
  for (const TensorInfo& t : f.tensors()) {
    if (!ends_with(t.name, kSuffixA) && !ends_with(t.name, kSuffixB))
      throw ModelFormatError(path + ": tensor " + t.name + " is not a LoRA tensor (<base tensor>.lora_a / .lora_b)");
    unused.insert(t.name);
  }
  if (unused.empty()) throw ModelFormatError(path + ": adapter has no tensors");

  WeightLoader ld(f);
  ad->base_ = &layers;
  ad->layers_.resize(layers.size());
  // Each adapted tensor is packed once (a fused tensor's parts share it): its A and B as the file
  // has them, where its packed copy goes, and which pairs point into it.
  struct Source {
    Matrix a, b;
    DType type;
    size_t offset = 0;
  };
  std::vector<Source> sources;
  std::map<const TensorInfo*, size_t> source_of;     // by the A tensor
  struct User {
    LoraPair* pair;
    size_t source;
    int64_t first;  // its first column of Bᵀ (a fused tensor's part)
  };
  std::vector<User> users;
  size_t total = 0;
  for (size_t il = 0; il < layers.size(); ++il) {
    const auto mats = layers[il].matrices();
    for (int k = 0; k < kLoraTargets; ++k) {
      const Matrix& m = *mats[static_cast<size_t>(k)];
      if (!m) continue;
      const std::string base = m.info->name;
      const std::string na = base + kSuffixA, nb = base + kSuffixB;
      const TensorInfo* ta = f.find_tensor(na);
      const TensorInfo* tb = f.find_tensor(nb);
      if (!ta && !tb) continue;
      if (!ta || !tb)
        throw ModelFormatError(path + ": tensor " + (ta ? na : nb) + " has no " + (ta ? nb : na) +
                               " (each adapted matrix needs both halves)");
      const int64_t full_out = m.info->ne[1];  // a fused tensor's rows, of which m is a view
      if (ta->n_dims != 2 || tb->n_dims != 2 || ta->ne[1] != tb->ne[0])
        throw ModelFormatError(path + ": rank mismatch for " + base + ": " + na + " has rank " +
                               std::to_string(ta->ne[1]) + ", " + nb + " has rank " + std::to_string(tb->ne[0]));
      const int64_t rank = ta->ne[1];
      if (rank <= 0 || rank > m.n_in)
        throw ModelFormatError(path + ": " + na + " has rank " + std::to_string(rank) + ", outside [1, " +
                               std::to_string(m.n_in) + "]");
      if (unused.erase(na)) {  // the tensor's first part: pack it
        unused.erase(nb);
        Source src;
        src.a = ld.matrix(na, m.n_in, rank);  // shape and type checked, naming the tensor
        src.b = ld.matrix(nb, rank, full_out);
        src.type = src.a.type == DType::F16 && src.b.type == DType::F16 ? DType::F16 : DType::F32;
        source_of[ta] = sources.size();
        sources.push_back(src);
        ad->targets_.push_back(base);
      }
      LoraPair& p = ad->layers_[il][k];
      p.n_rank = rank;
      p.n_in = m.n_in;
      p.n_out = m.n_out;
      p.scale = ad->alpha_ > 0 ? ad->alpha_ / static_cast<float>(rank) : 1.0f;
      const int64_t first = static_cast<int64_t>((m.data - m.info->data) / static_cast<ptrdiff_t>(m.row_bytes));
      users.push_back({&p, source_of.at(ta), first});
      ad->max_rank_ = std::max(ad->max_rank_, rank);
      ++ad->n_pairs_;
    }
  }
  if (!unused.empty())
    throw ModelFormatError(path + ": tensor " + *unused.begin() +
                           " adapts no matrix of the base model (supported: attention Q/K/V/output and FFN "
                           "gate/up/down of each layer, fused ones included)");

  // Layout: each tensor's A, then its parts' blocked Bᵀ, in the order a forward pass reads them.
  const auto round64 = [](size_t n) { return (n + 63) / 64 * 64; };
  // Sources are in layer order, targets in LayerWeights::matrices() order within a layer: one op's
  // pairs, and the next op's, are adjacent, so what the forward pass prefetches ahead is one run.
  std::vector<size_t> bt_offset(users.size()), span_begin(users.size()), bt_end(users.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    const Source& src = sources[s];
    sources[s].offset = total;
    total += round64(row_bytes(src.type, src.a.n_out * src.a.n_in));
    bool first = true;
    for (size_t u = 0; u < users.size(); ++u)
      if (users[u].source == s) {
        span_begin[u] = first ? sources[s].offset : total;
        first = false;
        bt_offset[u] = total;
        const int64_t blocks = (users[u].pair->n_out + kernels::kLoraBlock - 1) / kernels::kLoraBlock;
        total += round64(row_bytes(src.type, src.a.n_out * blocks * kernels::kLoraBlock));
        bt_end[u] = total;
      }
  }
  ad->packed_.assign(total, 0);  // zero: the last block's padding
  std::vector<float> row;
  for (const Source& src : sources) {
    const int64_t rank = src.a.n_out, n_in = src.a.n_in;
    uint8_t* a = ad->packed_.data() + src.offset;
    if (src.type == DType::F16) std::memcpy(a, src.a.data, row_bytes(DType::F16, rank * n_in));
    else
      for (int64_t r = 0; r < rank; ++r)
        quant::dequantize_row(src.a.type, src.a.row(r), reinterpret_cast<float*>(a) + r * n_in, n_in);
  }
  for (size_t u = 0; u < users.size(); ++u) {
    const Source& src = sources[users[u].source];
    LoraPair& p = *users[u].pair;
    const int64_t rank = p.n_rank;
    uint8_t* bt = ad->packed_.data() + bt_offset[u];
    row.resize(static_cast<size_t>(rank));
    for (int64_t o = 0; o < p.n_out; ++o) {
      const uint8_t* b = src.b.row(users[u].first + o);
      // element (r, o) of Bᵀ: block o / 16, row r, lane o % 16
      const size_t at = static_cast<size_t>((o / kernels::kLoraBlock * rank) * kernels::kLoraBlock + o % kernels::kLoraBlock);
      if (src.type == DType::F16) {
        for (int64_t r = 0; r < rank; ++r)
          std::memcpy(bt + 2 * (at + static_cast<size_t>(r * kernels::kLoraBlock)), b + 2 * r, 2);
      } else {
        quant::dequantize_row(src.b.type, b, row.data(), rank);
        for (int64_t r = 0; r < rank; ++r)
          reinterpret_cast<float*>(bt)[at + static_cast<size_t>(r * kernels::kLoraBlock)] = row[static_cast<size_t>(r)];
      }
    }
    p.type = src.type;
    p.a = ad->packed_.data() + src.offset;
    p.bt = bt;
    p.span_begin = ad->packed_.data() + span_begin[u];
    p.span_end = ad->packed_.data() + bt_end[u];
  }

  uint64_t h = mix(0x10a7ull, static_cast<uint64_t>(f.tensors().size()));
  for (const TensorInfo& t : f.tensors()) {
    h = hash_bytes(h, reinterpret_cast<const uint8_t*>(t.name.data()), t.name.size());
    h = hash_bytes(h, t.data, t.nbytes);
  }
  uint32_t alpha_bits;
  std::memcpy(&alpha_bits, &ad->alpha_, 4);
  ad->key_ = mix(h, alpha_bits);
  ad->file_->check_unchanged();  // a file rewritten while it was read is not what was hashed
  return ad;
}

uint64_t LoraMix::cache_key() const {
  if (uses.empty()) return 0;
  uint64_t h = 0x5eedull;
  for (const LoraUse& u : uses) {
    uint32_t bits;
    std::memcpy(&bits, &u.scale, 4);
    h = mix(mix(h, u.adapter->content_key()), bits);
  }
  return h ? h : 1;
}

}  // namespace edgellm
