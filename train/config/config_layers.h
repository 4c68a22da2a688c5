// The layer list (config.md 3.5, 3.6 steps 2 to 4 and 6): forming one block per layer from the
// uniform, layout or explicit form, merging the overrides, applying phase-2 --set assignments, and
// resolving each layer through its family. Every value keeps the place it was written, so an
// error in layer 7 names `model.block.mixer.window` and the layers that value reached.
//   LayerList list = form_layer_list(model, src);           // steps 2 and 3
//   apply_layer_assignment(list, assignment, src);           // step 4 (src learns the --set paths)
//   Json layers = resolve_layers(list, ctx, src);            // step 6: the resolved list
#pragma once
#include <map>
#include <string>
#include <vector>

#include "layers/layer_config.h"
#include "train/config/config_assign.h"
#include "train/config/config_source.h"

namespace hyb {

// Where each value of one layer was written, by its path inside the layer ("mixer.window").
class LayerOrigins {
 public:
  // `value` now sits at `rel`, written at `path`: forget what was recorded inside rel and record
  // rel and everything below it.
  void record(const std::string& rel, const Json& value, const std::string& path, const SourceMap& src);
  // The origin of rel: that of its longest recorded prefix, with the rest of rel appended.
  Origin find(const std::string& rel) const;
  // Makes `path` the origin of the layer as a whole (missing keys are reported under it).
  void set_root(const std::string& path, const SourceMap& src) { map_[""] = src.origin(path); }

 private:
  void record_tree(const std::string& rel, const Json& value, const std::string& path, const SourceMap& src);
  std::map<std::string, Origin> map_;
};

struct FormedLayer {
  Json block;  // {"mixer": {...}, "mlp": {...}}, possibly partial until step 6
  LayerOrigins origins;
};

struct LayerList {
  std::vector<FormedLayer> layers;
  std::vector<std::string> codes;  // one per layer in the layout form, else empty
};

// merge(a, b) of config.md 3.6, recording the origins of what b brings; `rel` is a's path inside
// the layer and `b_path` where b was written.
void merge_tracked(Json& a, LayerOrigins& origins, const std::string& rel, const Json& b, const std::string& b_path,
                   const SourceMap& src);

// Steps 2 and 3. Errors are ConfigKeyError at paths as written ("model.overrides[0].layers").
LayerList form_layer_list(const Json& model, const SourceMap& src);

// Step 4, one assignment whose path starts with model.layers; the places it writes are added to
// `src` as --set paths. Errors are ConfigKeyError.
void apply_layer_assignment(LayerList& list, const Assignment& a, SourceMap& src);

// Step 6: every layer through its family and the mlp rules, in index order. `base` carries the
// model's sizes (layer_index is set per layer). Errors are hyb::Error, already in the form of
// config.md 8.2 with the layers suffix.
Json resolve_layers(LayerList& list, const LayerConfigContext& base);

}  // namespace hyb
