#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "data/data_test_util.h"
#include "data/loader.h"
#include "data/shard_glob.h"

using namespace hyb;
using namespace hyb::test;

namespace {

constexpr int64_t kVocab = 50257;

// Writes shards of the given sizes with random tokens; returns their paths and all tokens in order.
std::pair<std::vector<std::string>, std::vector<uint16_t>> make_shards(const std::string& name, std::vector<int64_t> sizes) {
  const std::string dir = fresh_dir(name);
  std::vector<std::string> paths;
  std::vector<uint16_t> all;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto t = random_tokens(sizes[i], kVocab, 100 + i);
    paths.push_back(dir + "/part_" + std::to_string(i) + ".bin");
    write_shard(paths.back(), t);
    all.insert(all.end(), t.begin(), t.end());
  }
  return {paths, all};
}

std::vector<int32_t> ints(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

LoaderOptions opts(int64_t T, int64_t B, uint64_t seed, bool shuffle = true) {
  LoaderOptions o;
  o.seq_len = T, o.batch_size = B, o.seed = seed, o.shuffle = shuffle, o.vocab_size = kVocab;
  return o;
}

}  // namespace

TEST_CASE("windows of T+1 tokens never cross a shard: a shard of n tokens holds floor((n-1)/T)", "[data][loader]") {
  auto [paths, all] = make_shards("loader_windows", {10, 7, 1, 0, 5});
  DataLoader loader(TokenStream::open(paths), opts(3, 2, 1, false));
  // floor(9/3) + floor(6/3) + 0 + 0 + floor(4/3) windows, at stream offsets 0 3 6 | 10 13 | 18.
  REQUIRE(loader.windows_per_epoch() == 6);
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < 6; ++i) starts.push_back(loader.window_offset(0, i));
  REQUIRE(starts == std::vector<int64_t>{0, 3, 6, 10, 13, 18});
  // Inputs are x_0 .. x_{T-1} and targets x_1 .. x_T of each window, in stream order without shuffle.
  for (int step = 0; step < 3; ++step) {
    const Batch b = loader.next_batch();
    REQUIRE(b.inputs.shape() == Shape{2, 3});
    REQUIRE(b.inputs.dtype() == DType::i32);
    const auto in = ints(b.inputs), tg = ints(b.targets);
    for (int r = 0; r < 2; ++r)
      for (int t = 0; t < 3; ++t) {
        REQUIRE(in[size_t(r * 3 + t)] == all[size_t(starts[size_t(step * 2 + r)] + t)]);
        REQUIRE(tg[size_t(r * 3 + t)] == all[size_t(starts[size_t(step * 2 + r)] + t + 1)]);
      }
  }
  REQUIRE(loader.epoch() == 1);
  REQUIRE(loader.position() == 0);
}

TEST_CASE("shuffled order is a permutation fixed by the seed and different for another seed", "[data][loader]") {
  auto [paths, all] = make_shards("loader_seed", {4001, 3000});
  const TokenStream s = TokenStream::open(paths);
  DataLoader a(s, opts(16, 8, 7)), b(s, opts(16, 8, 7)), c(s, opts(16, 8, 8));
  const int64_t W = a.windows_per_epoch();
  REQUIRE(W == 250 + 187);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> oa, ob, oc;
    for (int64_t i = 0; i < W; ++i) {
      oa.push_back(a.window_offset(epoch, i));
      ob.push_back(b.window_offset(epoch, i));
      oc.push_back(c.window_offset(epoch, i));
    }
    REQUIRE(oa == ob);
    REQUIRE(oa != oc);
    REQUIRE(std::set<int64_t>(oa.begin(), oa.end()).size() == size_t(W));  // every window once
    REQUIRE(std::set<int64_t>(oc.begin(), oc.end()) == std::set<int64_t>(oa.begin(), oa.end()));
  }
  REQUIRE(a.window_offset(0, 0) != a.window_offset(1, 0));  // a new permutation each epoch
  for (int step = 0; step < 5; ++step) {
    const Batch ba = a.next_batch(), bb = b.next_batch(), bc = c.next_batch();
    REQUIRE(ints(ba.inputs) == ints(bb.inputs));
    REQUIRE(ints(ba.targets) == ints(bb.targets));
    REQUIRE(ints(ba.inputs) != ints(bc.inputs));
  }
}

TEST_CASE("a restored cursor continues the batch sequence identically, across an epoch boundary", "[data][loader]") {
  auto [paths, all] = make_shards("loader_cursor", {1000, 333});
  const TokenStream s = TokenStream::open(paths);
  DataLoader a(s, opts(10, 6, 3));
  REQUIRE(a.windows_per_epoch() == 99 + 33);
  for (int i = 0; i < 20; ++i) a.next_batch();  // 120 windows: near the end of epoch 0
  const std::string saved = a.cursor().dump();
  DataLoader b(s, opts(10, 6, 3));
  b.restore(nlohmann::json::parse(saved));
  REQUIRE(b.epoch() == 0);
  REQUIRE(b.position() == 120);
  for (int i = 0; i < 10; ++i) {  // 60 more windows: 12 of epoch 0, then 48 of epoch 1
    const Batch x = a.next_batch(), y = b.next_batch();
    REQUIRE(ints(x.inputs) == ints(y.inputs));
    REQUIRE(ints(x.targets) == ints(y.targets));
  }
  REQUIRE(a.epoch() == 1);
  REQUIRE(a.position() == 48);
  DataLoader other_seed(s, opts(10, 6, 4));
  REQUIRE_THROWS_WITH(other_seed.restore(nlohmann::json::parse(saved)), Catch::Contains("data cursor: seed was 3"));
  DataLoader other_len(s, opts(11, 6, 3));
  REQUIRE_THROWS_WITH(other_len.restore(nlohmann::json::parse(saved)), Catch::Contains("windows_per_epoch"));
}

TEST_CASE("ranks take disjoint contiguous blocks of each step's batch that together are the one-rank batch", "[data][loader]") {
  auto [paths, all] = make_shards("loader_ranks", {2000, 1500});
  const TokenStream s = TokenStream::open(paths);
  for (int R : {1, 2, 3, 6}) {
    DYNAMIC_SECTION("ranks " << R) {
      DataLoader single(s, opts(12, 6, 5));
      std::vector<DataLoader> ranks;
      for (int r = 0; r < R; ++r) {
        LoaderOptions o = opts(12, 6, 5);
        o.rank = r, o.world_size = R;
        ranks.emplace_back(s, o);
      }
      for (int step = 0; step < 60; ++step) {  // 360 windows: past the end of an epoch of 290
        const auto whole = ints(single.next_batch().inputs);
        std::vector<int32_t> joined;
        for (auto& l : ranks) {
          const Batch b = l.next_batch();
          REQUIRE(b.inputs.size(0) == 6 / R);
          const auto part = ints(b.inputs);
          joined.insert(joined.end(), part.begin(), part.end());
        }
        REQUIRE(joined == whole);
      }
    }
  }
  LoaderOptions bad = opts(12, 8, 5);
  bad.world_size = 3;
  REQUIRE_THROWS_WITH(DataLoader(s, bad), Catch::Contains("batch_size 8 is not a multiple of the number of ranks 3"));
}

TEST_CASE("val_fraction moves the last floor(f n) tokens of the training stream to validation", "[data][loader]") {
  auto [paths, all] = make_shards("loader_valfrac", {100, 53});
  const DataStreams d = open_data_streams(paths, {}, 0.2);  // n = 153, floor(30.6) = 30
  REQUIRE(d.train.size() == 123);
  REQUIRE(d.val.size() == 30);
  std::vector<int32_t> v(30);
  d.val.read(0, 30, v.data(), kVocab);
  REQUIRE(std::equal(v.begin(), v.end(), all.end() - 30));
  // The training windows stop before the validation tokens: shard 2 keeps 23 tokens, floor(22/5) windows.
  DataLoader loader(d.train, opts(5, 1, 1, false));
  REQUIRE(loader.windows_per_epoch() == 19 + 4);
  REQUIRE(loader.window_offset(0, 22) + 5 < 123);
  REQUIRE_THROWS_WITH(open_data_streams(paths, {paths[0]}, 0.1), Catch::Contains("given together"));
  REQUIRE_THROWS_WITH(open_data_streams(paths, {}, 0.5), Catch::Contains("[0, 0.5)"));
}

TEST_CASE("evaluation windows are the first floor((|S|-1)/T) non-overlapping windows and may cross shards", "[data][loader]") {
  auto [paths, all] = make_shards("loader_eval", {20, 14});
  const TokenStream s = TokenStream::open(paths);
  EvalWindows w(s, 8, kVocab);
  REQUIRE(w.count() == 4);  // floor(33 / 8)
  const Batch b = w.batch(0, 4);
  const auto in = ints(b.inputs), tg = ints(b.targets);
  for (int k = 0; k < 4; ++k)
    for (int t = 0; t < 8; ++t) {
      REQUIRE(in[size_t(k * 8 + t)] == all[size_t(k * 8 + t)]);
      REQUIRE(tg[size_t(k * 8 + t)] == all[size_t(k * 8 + t + 1)]);
    }
  REQUIRE(EvalWindows(s, 8, kVocab, 3).count() == 3);
  REQUIRE(EvalWindows(s, 8, kVocab, 10).count() == 4);
  REQUIRE_THROWS_WITH(w.batch(3, 2), Catch::Contains("outside the 4 windows"));
  REQUIRE(rank_share(10, 0, 3) == std::pair<int64_t, int64_t>{0, 3});
  REQUIRE(rank_share(10, 2, 3) == std::pair<int64_t, int64_t>{6, 10});
}

TEST_CASE("a token id at or above the vocabulary size is an error naming the shard and the offset", "[data][loader]") {
  const std::string dir = fresh_dir("loader_vocab");
  auto t = random_tokens(40, 256, 9);
  t[27] = 300;
  write_shard(dir + "/bytes.bin", t);
  LoaderOptions o = opts(39, 1, 1, false);
  o.vocab_size = 256;
  DataLoader loader(TokenStream::open({dir + "/bytes.bin"}), o);
  REQUIRE_THROWS_WITH(loader.next_batch(), Catch::Contains(dir + "/bytes.bin") && Catch::Contains("token id 300 at token offset 27"));
  REQUIRE_THROWS_WITH(DataLoader(TokenStream::open({dir + "/bytes.bin"}), opts(40, 1, 1)), Catch::Contains("no window of seq_len + 1 = 41"));
}

TEST_CASE("shard globs expand in byte order and a glob matching nothing is an error", "[data][loader]") {
  const std::string dir = fresh_dir("loader_glob");
  for (const char* n : {"b_2.bin", "B_1.bin", "a_10.bin", "a_9.bin", ".a_0.bin", "c.txt"}) write_shard(dir + "/" + n, {1, 2, 3});
  const auto got = expand_shard_paths({dir + "/*.bin", dir + "/c.txt"});
  REQUIRE(got == std::vector<std::string>{dir + "/B_1.bin", dir + "/a_10.bin", dir + "/a_9.bin", dir + "/b_2.bin", dir + "/c.txt"});
  REQUIRE(expand_shard_paths({dir + "/a_[0-9].bin"}) == std::vector<std::string>{dir + "/a_9.bin"});
  REQUIRE_THROWS_WITH(expand_shard_paths({dir + "/x*.bin"}), Catch::Contains(dir + "/x*.bin: the pattern matches no file"));
  REQUIRE_THROWS_WITH(expand_shard_paths({dir + "/*/x.bin"}), Catch::Contains("last path component only"));
}
