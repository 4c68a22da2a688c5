// The data section (config.md 5): its keys, step 5's resolution (task keys, seq_len, MQAR), and
// step 7's file checks, the only part of resolution that reads files: glob matches and shard
// headers, and at least one window of seq_len + 1 tokens in the training and validation streams.
//   Json data = resolve_data_section(cfg["data"]);
//   DataFiles f = check_data_files(data);   // f.train, f.val: the shard files, in reading order
#pragma once
#include <string>
#include <vector>

#include "core/config_table.h"

namespace hyb {

extern const KeyTable kDataKeys;

Json resolve_data_section(const Json& data);

struct DataFiles {
  std::vector<std::string> train, val;
  int64_t train_tokens = 0, val_tokens = 0;
};

// Errors are ConfigKeyError at data.train, data.val (or an element of a list) and data.val_fraction.
DataFiles check_data_files(const Json& data);

}  // namespace hyb
