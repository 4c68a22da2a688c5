#include "layers/mixer.h"

#include <cmath>

namespace hyb {

double MixerContext::residual_std() const { return init_std / std::sqrt(2.0 * double(num_layers)); }

std::unique_ptr<DecodeState> Mixer::start_decode(int64_t, Device, DType) {
  throw Error("this layer type has no decode path yet");
}

Var Mixer::decode(const Var&, DecodeState&) { throw Error("this layer type has no decode path yet"); }

}  // namespace hyb
