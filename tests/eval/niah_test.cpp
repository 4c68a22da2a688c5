// The needle test (eval.md 5): prompts of exactly L tokens with the needle where 5.1 puts it, keys
// unique in the prompt, numbers of 5 to 7 digits, streams per cell; the digit-prefix answer rule;
// oracles that answer right, wrong and only when the needle is near; records, table and heat map.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "../data/data_test_util.h"
#include "eval/niah.h"

using namespace hyb;
using Catch::Contains;

namespace {

Tokenizer& gpt2() {
  static std::unique_ptr<Tokenizer> tok = make_tokenizer("gpt2");
  return *tok;
}

int32_t id_of(const char* text) {
  const std::vector<int32_t> ids = gpt2().encode(text);
  REQUIRE(ids.size() == 1);
  return ids[0];
}

const char* city_of(int32_t key) {
  for (const NiahKey& k : niah_keys())
    if (k.id == key) return k.city;
  FAIL("no city has id " << key);
  return "";
}

// Nine " the" then "." over and over: H[p] ends a sentence iff p % 10 == 9.
std::vector<int32_t> ten_token_sentences(int64_t n) {
  std::vector<int32_t> h;
  for (int64_t p = 0; p < n; ++p) h.push_back(p % 10 == 9 ? id_of(".") : id_of(" the"));
  return h;
}

// The prompt 5.1 step 4 describes, assembled from the trial's draws and the spec's texts.
std::vector<int32_t> expected_prompt(const std::vector<int32_t>& hay, const NiahTrial& t) {
  const std::string city = city_of(t.key);
  const auto slice = hay.begin() + t.offset;
  std::vector<int32_t> p(slice, slice + t.insert);
  gpt2().encode(" The special magic number for " + city + " is " + t.number + ".", p);
  p.insert(p.end(), slice + t.insert, slice + t.h);
  gpt2().encode("\nWhat is the special magic number for " + city + "? The special magic number for " + city + " is", p);
  return p;
}

// A decoder that reads the needle back out of each prompt and answers `edit(number)`, or nothing
// when the needle starts more than `reach` characters before the question.
NiahDecoder oracle(std::function<std::string(const std::string&)> edit, size_t reach = std::string::npos) {
  return [edit, reach](const std::vector<std::vector<int32_t>>& prompts) {
    std::vector<std::vector<int32_t>> out;
    for (const std::vector<int32_t>& p : prompts) {
      REQUIRE(p.size() == prompts[0].size());  // one length per batch
      const std::string text = gpt2().decode(p);
      const std::string ask = "\nWhat is the special magic number for ";
      const size_t q = text.rfind(ask);
      const std::string city = text.substr(q + ask.size(), text.find('?', q) - q - ask.size());
      const std::string needle = " The special magic number for " + city + " is ";
      const size_t at = text.find(needle);
      REQUIRE(at < q);
      size_t end = at + needle.size();
      while (std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
      const std::string number = text.substr(at + needle.size(), end - at - needle.size());
      std::vector<int32_t> ids = gpt2().encode(q - at <= reach ? " " + edit(number) + ". The" : " not here.");
      while (ids.size() < size_t(kNiahNewTokens)) ids.push_back(id_of("\n"));
      ids.resize(size_t(kNiahNewTokens));
      out.push_back(ids);
    }
    return out;
  };
}

}  // namespace

TEST_CASE("niah keys: each city is its one GPT-2 token; another tokenizer is refused naming the city", "[eval][niah]") {
  REQUIRE(niah_keys().size() == 48);
  NiahPrompts ok(gpt2(), ten_token_sentences(100));  // checks all 48
  CHECK(niah_keys()[0].id == 6342);
  auto byte = make_tokenizer("byte");
  REQUIRE_THROWS_WITH(NiahPrompts(*byte, {}), Contains("\" Paris\"") && Contains("6342"));
}

TEST_CASE("niah's brown haystack is the canonical brown.test split, end-of-text tokens kept", "[eval][niah]") {
  const NiahHaystack hay = niah_brown_haystack(gpt2());
  const auto fixture = nlohmann::json::parse(test::read_bytes(std::string(HYBRID_SOURCE_DIR) + "/tests/data/gpt2_fixture.json"));
  CHECK(hay.name == "brown.test");
  CHECK(hay.tokens.size() == fixture["splits"]["brown.test"]["tokens"].get<size_t>());
  CHECK(hay.sha256 == fixture["splits"]["brown.test"]["sha256"]);
  CHECK(std::count(hay.tokens.begin(), hay.tokens.end(), 50256) == 50);  // one after each of the 50 samples
}

TEST_CASE("niah sentence ends: . ! ? with at most one closing quote, or a newline", "[eval][niah]") {
  for (const char* yes : {".", " end.", "!", "?", ".\"", "?'", ".\u201d", "!\u2019", "\n", " a\n b", "??"}) CHECK(ends_sentence(yes));
  for (const char* no : {"", " the", ".,", ". ", ".\"\"", " \"", "3.5x", ")"}) CHECK_FALSE(ends_sentence(no));
}

TEST_CASE("niah prompts: exactly L tokens, the needle at the last sentence end before floor(d h), 100% right before the question",
          "[eval][niah]") {
  const std::vector<int32_t> hay = ten_token_sentences(3000);
  NiahPrompts prompts(gpt2(), hay);
  RngStream rng(3, "test");
  for (double depth : {0.0, 10.0, 35.0, 50.0, 90.0, 100.0})
    for (int trial = 0; trial < 8; ++trial) {
      const int64_t L = 120 + 37 * trial;
      const NiahTrial t = prompts.trial(L, depth, rng);
      INFO("L " << L << " depth " << depth << " offset " << t.offset);
      REQUIRE(int64_t(t.prompt.size()) == L);
      CHECK(t.prompt == expected_prompt(hay, t));
      const int64_t i0 = int64_t(std::floor(depth * double(t.h) / 100));
      // Sentence ends sit at H[p] with p % 10 == 9: the insertion index moves back to o + i = 0 mod 10,
      // or to i = 0, which always counts.
      CHECK(t.insert == (depth == 100 ? t.h : std::max<int64_t>(0, i0 - (t.offset + i0) % 10)));
      CHECK(t.depth() == double(t.insert) / double(t.h));
      CHECK(std::count(t.prompt.begin(), t.prompt.end(), t.key) == 3);  // needle, question twice
      if (depth == 100)  // the needle's last token, ".", is followed by the question's first, "\n"
        CHECK(t.prompt[size_t(t.h + t.needle_tokens)] == id_of("\n"));
    }
}

TEST_CASE("niah insertion without a sentence end: back at most 64 tokens, else floor(d h); i = 0 counts as an end", "[eval][niah]") {
  NiahPrompts prompts(gpt2(), std::vector<int32_t>(3000, id_of(" the")));
  RngStream rng(4, "test");
  const NiahTrial far = prompts.trial(400, 50, rng);
  CHECK(far.insert == far.h / 2);  // floor(0.5 h) > 64: no end in reach
  const NiahTrial near = prompts.trial(400, 10, rng);
  CHECK(near.h / 10 <= 64);
  CHECK(near.insert == 0);
}

TEST_CASE("niah keys present in the haystack slice are drawn again; a slice holding every key is an error", "[eval][niah]") {
  std::vector<int32_t> most, all;
  for (int rep = 0; rep < 40; ++rep)
    for (const NiahKey& k : niah_keys()) {
      all.push_back(k.id);
      if (std::string(k.city) != "Mumbai") most.push_back(k.id);
    }
  NiahPrompts prompts(gpt2(), most);
  RngStream rng(5, "test");
  for (int trial = 0; trial < 20; ++trial) {
    const NiahTrial t = prompts.trial(160, 50, rng);  // h > 47: every slice holds the 47 others
    CHECK(t.key == id_of(" Mumbai"));
    CHECK(std::count(t.prompt.begin(), t.prompt.end(), t.key) == 3);
  }
  NiahPrompts full(gpt2(), all);
  REQUIRE_THROWS_WITH(full.trial(160, 50, rng), Contains("every key occurs") && Contains("L = 160"));
}

TEST_CASE("niah numbers: 5, 6 or 7 digits uniformly, no leading zero; a length that leaves h < 16 names L", "[eval][niah]") {
  const NiahHaystack filler = niah_filler_haystack(gpt2(), 200);
  CHECK(filler.name == "filler");
  CHECK(gpt2().decode(std::vector<int32_t>(filler.tokens.begin(), filler.tokens.begin() + 7)) == " The grass is green. The sky");
  NiahPrompts prompts(gpt2(), filler.tokens);
  RngStream rng(6, "test");
  std::map<size_t, int> by_digits;
  for (int trial = 0; trial < 600; ++trial) {
    const NiahTrial t = prompts.trial(64, 50, rng);
    ++by_digits[t.number.size()];
    CHECK(t.number[0] != '0');
    CHECK(niah_answer(t.number) == t.number);
  }
  REQUIRE(by_digits.size() == 3);
  for (size_t d : {5, 6, 7}) CHECK(std::abs(by_digits[d] - 200) < 50);  // 3.5 sd of a binomial(600, 1/3)
  REQUIRE_THROWS_WITH(prompts.trial(30, 50, rng), Contains("L = 30") && Contains("fewer than 16"));
}

TEST_CASE("niah cells draw from stream niah/{j}/{k} and the seed only", "[eval][niah]") {
  const NiahHaystack filler = niah_filler_haystack(gpt2(), 300);
  NiahPrompts prompts(gpt2(), filler.tokens);
  const NiahGrid g{{64, 96}, {0, 50, 100}, 3, 7};
  const std::vector<NiahCell> a = make_niah_cells(prompts, g), b = make_niah_cells(prompts, g);
  REQUIRE(a.size() == 6);
  auto same = [](const NiahCell& x, const NiahCell& y) {
    for (size_t t = 0; t < x.trials.size(); ++t)
      if (x.trials[t].prompt != y.trials[t].prompt || x.trials[t].number != y.trials[t].number) return false;
    return x.trials.size() == y.trials.size();
  };
  for (size_t c = 0; c < a.size(); ++c) CHECK(same(a[c], b[c]));
  CHECK(a[5].j == 1);
  CHECK(a[5].k == 2);
  RngStream rng(7, "niah/1/2");
  CHECK(a[5].trials[0].prompt == prompts.trial(96, 100, rng).prompt);
  // Another second length leaves the first length's cells alone; another seed changes them.
  const std::vector<NiahCell> c = make_niah_cells(prompts, {{64, 128}, {0, 50, 100}, 3, 7});
  for (size_t k = 0; k < 3; ++k) CHECK(same(a[k], c[k]));
  CHECK_FALSE(same(a[0], make_niah_cells(prompts, {{64, 96}, {0, 50, 100}, 3, 8})[0]));
  REQUIRE_THROWS_WITH(make_niah_cells(prompts, {{96, 64}, {0}, 3, 7}), Contains("--lengths") && Contains("increasing"));
  REQUIRE_THROWS_WITH(make_niah_cells(prompts, {{64}, {0, 120}, 3, 7}), Contains("--depths"));
}

TEST_CASE("niah answers: leading white space dropped, the longest digit prefix, exact match", "[eval][niah]") {
  CHECK(niah_answer(" 1234567. The") == "1234567");
  CHECK(niah_answer("\n\t 42abc") == "42");
  CHECK(niah_answer("abc 123") == "");
  CHECK(niah_answer("") == "");
  CHECK(niah_correct(" 1234567.", "1234567"));
  CHECK(niah_correct("1234567 is", "1234567"));
  CHECK_FALSE(niah_correct(" 12345678", "1234567"));  // longer
  CHECK_FALSE(niah_correct(" 123456.", "1234567"));   // shorter
  CHECK_FALSE(niah_correct(" -1234567", "1234567"));
  CHECK_FALSE(niah_correct(" 1,234,567", "1234567"));
}

TEST_CASE("niah grid: an oracle scores 1, a wrong digit count 0, a local copier passes only the locality check", "[eval][niah]") {
  CHECK(niah_default_lengths(1024) == std::vector<int64_t>{256, 512, 768, 1024, 1280, 1536, 1792, 2048});
  CHECK(niah_default_lengths(100) == std::vector<int64_t>{24, 48, 72, 104, 128, 152, 176, 200});
  CHECK(niah_default_depths().size() == 11);
  CHECK(niah_default_depths().back() == 100);

  const NiahHaystack filler = niah_filler_haystack(gpt2(), 400);
  NiahPrompts prompts(gpt2(), filler.tokens);
  const NiahGrid g{{64, 96, 160}, {0, 50, 100}, 4, 0};
  const int64_t T_train = 96;
  auto run = [&](const NiahDecoder& d) {
    std::vector<NiahCell> cells = make_niah_cells(prompts, g);
    for (NiahCell& c : cells) score_niah_cell(c, d, gpt2());
    return cells;
  };
  const std::vector<NiahCell> right = run(oracle([](const std::string& n) { return n; }));
  for (const NiahCell& c : right) CHECK(c.correct == 4);
  const NiahSummary s = summarize_niah(right, T_train);
  CHECK(s.acc_in == 1.0);
  CHECK(s.acc_out == 1.0);
  CHECK(s.acc_all == 1.0);
  CHECK(s.locality_checked);
  CHECK_FALSE(s.no_local_copy());

  for (const auto& edit : std::vector<std::function<std::string(const std::string&)>>{
           [](const std::string& n) { return n + "0"; }, [](const std::string& n) { return n.substr(0, n.size() - 1); }}) {
    const std::vector<NiahCell> wrong = run(oracle(edit));
    for (const NiahCell& c : wrong) CHECK(c.correct == 0);
    CHECK(summarize_niah(wrong, T_train).no_local_copy());
  }

  // Reaches 60 characters: the needle right before the question (depth 100%) and nothing deeper.
  const std::vector<NiahCell> local = run(oracle([](const std::string& n) { return n; }, 60));
  const NiahSummary ls = summarize_niah(local, T_train);
  CHECK_FALSE(ls.no_local_copy());
  for (const NiahCell& c : local) CHECK(c.acc() == (c.depth_percent == 100 ? 1.0 : 0.0));
  CHECK(ls.acc_in == Approx(1.0 / 3));
  CHECK(ls.acc_out == Approx(1.0 / 3));

  const auto cell = nlohmann::json::parse(niah_cell_record(local[1], {"run", "sha", 9, 1}).line());
  CHECK(cell["kind"] == "niah");
  CHECK(cell["L"] == 64);
  CHECK(cell["depth"] == 0.5);
  CHECK(cell["trials"] == 4);
  CHECK(cell["correct"] == 0);
  CHECK(cell["acc"] == 0.0);
  CHECK(cell["depth_actual_mean"].get<double>() == Approx(local[1].depth_actual_mean()));
  CHECK(cell["depth_actual_mean"].get<double>() > 0.25);  // 0.5 moved back to a sentence end
  CHECK(niah_cell_record(local[1], {}).line().find("\"L\":64,\"depth\":0.5,\"depth_actual_mean\":") != std::string::npos);

  const std::vector<NiahCell> in_only(right.begin(), right.begin() + 6);
  const auto sum = nlohmann::json::parse(niah_summary_record(summarize_niah(in_only, T_train), filler, T_train, 0, {}).line());
  CHECK(sum["kind"] == "niah.summary");
  CHECK(sum["acc_in"] == 1.0);
  CHECK(sum["acc_out"].is_null());
  CHECK(sum["nonfinite"] == nlohmann::json::array({"acc_out"}));
  CHECK(sum["flags"] == nlohmann::json::array());
  CHECK(sum["haystack"] == "filler");
  CHECK(sum["haystack_sha256"] == filler.sha256);
  const auto flagged = niah_summary_record(summarize_niah(run(oracle([](const std::string&) { return "7"; })), T_train),
                                           filler, T_train, 0, {});
  CHECK(flagged.line().find("\"flags\":[\"no_local_copy\"]") != std::string::npos);

  const std::string table = niah_table(local, g, T_train);
  CHECK(table.find("| depth | 64 | 96 | 160* |") == 0);
  CHECK(table.find("| 100% | 100.0% | 100.0% | 100.0% |") != std::string::npos);
  CHECK(table.find("| 50% | 0.0% | 0.0% | 0.0% |") != std::string::npos);

  const std::string svg = render_svg(niah_heat_map(local, g, T_train));
  auto count = [&](const std::string& s) {
    int64_t n = 0;
    for (size_t at = svg.find(s); at != std::string::npos; at = svg.find(s, at + 1)) ++n;
    return n;
  };
  CHECK(count(">0%</text>") == 1 + 6);    // the top row's tick and the six cells above 100%
  CHECK(count(">100%</text>") == 1 + 3);  // the bottom row's tick and its three cells
  CHECK(count(">50%</text>") == 1);
  CHECK(svg.find(">160</text>") != std::string::npos);
  CHECK(svg.find("<line x1=\"180.00\"") != std::string::npos);  // the dashed line between 96 and 160
  CHECK(svg.find("stroke-dasharray") != std::string::npos);
  CHECK(svg.find("#1a9850") != std::string::npos);
  CHECK(svg.find("#d73027") != std::string::npos);
}
