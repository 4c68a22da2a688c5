// The fused paths' off switches: HYBRID_GSA_FUSED=0 (and _NHA_, _GDN_, _SIMPLE_GLA_) sends bf16 back to
// the generic kernels or the toolkit sequence, for A/B timing or bisecting a mismatch. docs/architecture.md
// lists them.
//   static const bool enabled = !env_is_zero("HYBRID_GSA_FUSED");   // read once
#pragma once

namespace hyb {

// Whether the environment variable `name` is set to exactly "0".
bool env_is_zero(const char* name);

}  // namespace hyb
