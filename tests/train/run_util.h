// Small training runs for the trainer tests: a fresh directory holding byte-level train and val
// shards (a repeated phrase with one token in `noise` random, so there is something to learn), and
// the metrics records a run wrote.
//   std::string d = tiny_run_dir("launch", "two processes", 19);   // d/train.bin, d/val.bin
//   std::vector<double> losses = metric(d + "/run/metrics.jsonl", "train");
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hyb {

std::string tiny_run_dir(const std::string& name, const std::string& phrase, uint64_t seed, int64_t train_tokens = 6000,
                         int64_t val_tokens = 600, int noise = 6);

// One numeric field of every record of a kind ("train", "ppl"), in file order.
std::vector<double> metric(const std::string& metrics_path, const char* kind, const char* field = "loss");

}  // namespace hyb
