#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/cpu_features.h"
#include "kernels/kernels.h"

namespace edgellm::kernels {

// Each ISA unit provides a filler that overrides entries of a copy of the generic table.
void fill_generic_table(KernelTable& t);
#ifdef EDGELLM_HAVE_AVX2
void fill_avx2_table(KernelTable& t);
#endif
#ifdef EDGELLM_HAVE_AVX512
void fill_avx512_table(KernelTable& t);
#endif
#ifdef EDGELLM_HAVE_NEON
void fill_neon_table(KernelTable& t);
#endif
#ifdef EDGELLM_HAVE_NEON_DOTPROD
void fill_neon_dotprod_table(KernelTable& t);
#endif
#ifdef EDGELLM_HAVE_NEON_I8MM
void fill_neon_i8mm_table(KernelTable& t);
#endif

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Neon: return "neon";
    case Isa::NeonDotprod: return "neon-dotprod";
    case Isa::NeonI8mm: return "neon-i8mm";
  }
  return "?";
}

namespace {

bool cpu_runs(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return f.avx2 && f.fma && f.f16c;
    case Isa::Avx512: return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl &&
                             f.avx512dq && f.avx512vnni;
    case Isa::Neon: return f.neon;
    case Isa::NeonDotprod: return f.neon && f.dotprod;
    case Isa::NeonI8mm: return f.neon && f.dotprod && f.i8mm;  // HWCAP_ASIMDDP and HWCAP2_I8MM
  }
  return false;
}

// SIMD tables start from the generic one but not from its packed matmuls (scalar references):
// a level packs weights only where it has its own packed kernels, and keeps its GGUF-layout
// kernels for the rest.
KernelTable without_packed(const KernelTable& t) {
  KernelTable c = t;
  for (auto& f : c.packed_matmul) f = nullptr;
  return c;
}

struct Tables {
  KernelTable generic, avx2, avx512, neon, neon_dotprod, neon_i8mm;
  bool has_avx2 = false, has_avx512 = false, has_neon = false, has_neon_dotprod = false, has_neon_i8mm = false;
  Tables() {
    fill_generic_table(generic);
    generic.isa = Isa::Scalar;
#ifdef EDGELLM_HAVE_AVX2
    avx2 = without_packed(generic);
    fill_avx2_table(avx2);
    avx2.isa = Isa::Avx2;
    has_avx2 = true;
#endif
#ifdef EDGELLM_HAVE_AVX512
    avx512 = has_avx2 ? avx2 : without_packed(generic);
    fill_avx512_table(avx512);
    avx512.isa = Isa::Avx512;
    has_avx512 = true;
#endif
#ifdef EDGELLM_HAVE_NEON
    neon = without_packed(generic);
    fill_neon_table(neon);
    neon.isa = Isa::Neon;
    has_neon = true;
#endif
#ifdef EDGELLM_HAVE_NEON_DOTPROD
    neon_dotprod = has_neon ? neon : without_packed(generic);
    fill_neon_dotprod_table(neon_dotprod);
    neon_dotprod.isa = Isa::NeonDotprod;
    has_neon_dotprod = true;
#endif
#ifdef EDGELLM_HAVE_NEON_I8MM
    neon_i8mm = has_neon_dotprod ? neon_dotprod : without_packed(generic);
    fill_neon_i8mm_table(neon_i8mm);
    neon_i8mm.isa = Isa::NeonI8mm;
    has_neon_i8mm = true;
#endif
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

const KernelTable* compiled(Isa isa) {
  const Tables& t = tables();
  switch (isa) {
    case Isa::Scalar: return &t.generic;
    case Isa::Avx2: return t.has_avx2 ? &t.avx2 : nullptr;
    case Isa::Avx512: return t.has_avx512 ? &t.avx512 : nullptr;
    case Isa::Neon: return t.has_neon ? &t.neon : nullptr;
    case Isa::NeonDotprod: return t.has_neon_dotprod ? &t.neon_dotprod : nullptr;
    case Isa::NeonI8mm: return t.has_neon_i8mm ? &t.neon_i8mm : nullptr;
  }
  return nullptr;
}

const KernelTable* best() {
  for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::NeonI8mm, Isa::NeonDotprod, Isa::Neon})
    if (const KernelTable* t = table_for(isa)) return t;
  return &tables().generic;
}

const KernelTable* by_name(const char* name) {
  for (Isa isa : kAllIsas) {
    if (std::strcmp(name, isa_name(isa)) == 0) {
      const KernelTable* t = table_for(isa);
      if (!t)
        throw std::invalid_argument(std::string("EDGELLM_ISA=") + name +
                                    ": this build or this CPU cannot run that instruction set");
      return t;
    }
  }
  throw std::invalid_argument(std::string("EDGELLM_ISA=") + name +
                              ": unknown (use scalar, avx2, avx512, neon, neon-dotprod or neon-i8mm)");
}

const KernelTable* default_choice() {
  const char* env = std::getenv("EDGELLM_ISA");
  if (env && *env) return by_name(env);
  return best();
}

std::atomic<const KernelTable*> g_active{nullptr};

}  // namespace

const KernelTable& generic_table() { return tables().generic; }

const KernelTable* table_for(Isa isa) { return cpu_runs(isa) ? compiled(isa) : nullptr; }

const KernelTable& active() {
  const KernelTable* t = g_active.load(std::memory_order_acquire);
  if (!t) {
    t = default_choice();
    g_active.store(t, std::memory_order_release);
  }
  return *t;
}

void set_active(const char* name) {
  g_active.store(name ? by_name(name) : default_choice(), std::memory_order_release);
}

}  // namespace edgellm::kernels
