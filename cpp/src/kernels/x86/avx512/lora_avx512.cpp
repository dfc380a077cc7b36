// The avx512 level's LoRA products (x86/lora_x86.inc.h, compiled with this unit's flags).
#include "kernels/x86/lora_x86.inc.h"

namespace edgellm::kernels {

void fill_avx512_lora(KernelTable& t) {
  t.lora_down = lora_down_dispatch;
  t.lora_up = lora_up_dispatch;
}

}  // namespace edgellm::kernels
