// The neon level's LoRA products (arm/lora_neon.inc.h, compiled with this unit's flags); the
// dotprod and i8mm tables inherit them (dispatch.cpp copies the neon table first).
#include "kernels/arm/lora_neon.inc.h"

namespace edgellm::kernels {

void fill_neon_lora(KernelTable& t) {
  t.lora_down = lora_down_neon;
  t.lora_up = lora_up_neon;
}

}  // namespace edgellm::kernels
