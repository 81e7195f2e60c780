// Bulk conversions between f16 and f32, with the F16C instructions where the CPU has them
// (chosen at run time: the build targets baseline x86-64) and Float16's own conversions
// elsewhere. Both round f32 to f16 to nearest even and widen exactly, so the results are the
// same bits, NaN payloads aside (the instructions quiet a signalling NaN; the numeric contract
// leaves payloads out of "bit-exact", docs/architecture.md).
#pragma once

#include <cstdint>

#include "ampc/float_types.h"

namespace ampc::runtime::cpu {

// out[i] = in[i] as f32, for i < n.
void widen_f16(const Float16* in, float* out, int64_t n);
// out[i] = in[i] rounded to f16, for i < n.
void narrow_to_f16(const float* in, Float16* out, int64_t n);

}  // namespace ampc::runtime::cpu
