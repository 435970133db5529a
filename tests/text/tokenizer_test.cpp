#include <mvgpt/text/tokenizer.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "text/text_test_util.h"
#include <mvgpt/util/atomic_file.h>

namespace mvgpt::text {
namespace {

using testing_util::expect_throw_with;

class TokenizerFiles : public testing_util::ScratchDir {};

// A small English-like corpus with repeated words, punctuation, digits and newlines.
std::string small_corpus() {
  return "Once upon a time, there was a little girl named Lily. She liked to play in the park.\n"
         "One day, Lily saw a big dog. The dog was happy and wagged its tail. Lily's mom said, \"Be kind!\"\n"
         "They played all day. It's 2024 and the sun is warm; they'll play again at 10 o'clock.\n"
         "The end.\n";
}

// Reference BPE, straight from the definition: apply each merge in order, left to right, to the
// whole chunk.
std::vector<TokenId> reference_bpe(std::string_view chunk, const std::vector<Merge>& merges) {
  std::vector<TokenId> ids;
  for (const char c : chunk) ids.push_back(static_cast<unsigned char>(c));
  for (size_t r = 0; r < merges.size(); ++r) {
    std::vector<TokenId> next;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + 1 < ids.size() && ids[i] == merges[r].first && ids[i + 1] == merges[r].second) {
        next.push_back(TokenId(kNumByteTokens + r));
        ++i;
      } else {
        next.push_back(ids[i]);
      }
    }
    ids.swap(next);
  }
  return ids;
}

std::vector<TokenId> reference_encode(std::string_view text, const std::vector<Merge>& merges) {
  std::map<std::string_view, std::vector<TokenId>> seen;  // the reference is slow: once per distinct chunk
  std::vector<TokenId> out;
  for (std::string_view chunk : split_chunks(text)) {
    auto it = seen.find(chunk);
    if (it == seen.end()) it = seen.emplace(chunk, reference_bpe(chunk, merges)).first;
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xFF);
  return s;
}

// ---- pre-tokenizer ----

std::vector<std::string> chunks_of(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view c : split_chunks(text)) out.emplace_back(c);
  return out;
}

TEST(SplitChunks, Gpt2LikeRule) {
  EXPECT_EQ(chunks_of("Hello world, it's 2024!\n\nBye  now"),
            (std::vector<std::string>{"Hello", " world", ",", " it", "'s", " 2024", "!", "\n", "\n", "Bye", " ", " now"}));
  EXPECT_EQ(chunks_of("they'll I'm we're you've he'd don't"),
            (std::vector<std::string>{"they", "'ll", " I", "'m", " we", "'re", " you", "'ve", " he", "'d", " don",
                                      "'t"}));
  EXPECT_EQ(chunks_of("a  \n\tb ...c 12ab"),
            (std::vector<std::string>{"a", "  \n", "\t", "b", " ...", "c", " 12", "ab"}));
  EXPECT_EQ(chunks_of("end  \n "), (std::vector<std::string>{"end", "  \n "}));  // trailing whitespace: one chunk
  EXPECT_EQ(chunks_of(" 'x"), (std::vector<std::string>{" '", "x"}));
  EXPECT_TRUE(chunks_of("").empty());
}

TEST(SplitChunks, Utf8LettersAndSymbols) {
  // Curly quotes and dashes are symbols; accented letters are letters.
  EXPECT_EQ(chunks_of("\u201cHi\u201d caf\u00e9 don\u2019t \u2014 ni\u00f1o"),
            (std::vector<std::string>{"\u201c", "Hi", "\u201d", " caf\u00e9", " don", "\u2019", "t", " \u2014",
                                      " ni\u00f1o"}));
  // Invalid UTF-8 (lone continuation, cut sequence, 0xFF) is "other", one byte at a time, and a NUL too.
  EXPECT_EQ(chunks_of(std::string("ab\x80\xff" "cd\xe2\x80", 8)),
            (std::vector<std::string>{"ab", "\x80\xff", "cd", "\xe2\x80"}));
  EXPECT_EQ(chunks_of(std::string("x\0y", 3)), (std::vector<std::string>{"x", std::string(1, '\0'), "y"}));
}

TEST(SplitChunks, ConcatenatesBackToTheInput) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 50; ++trial) {
    const std::string text = random_bytes(rng, 1 + rng() % 300);
    std::string joined;
    for (std::string_view c : split_chunks(text)) {
      EXPECT_FALSE(c.empty());
      joined += c;
    }
    EXPECT_EQ(joined, text);
  }
}

// ---- training ----

TEST(TokenizerTrain, MostFrequentPairFirstWithDeterministicTies) {
  // Chunks: "ab", " ab", " ab", " cd". Pairs: (a,b) x3, (' ',a) x2, (' ',c) x1, (c,d) x1.
  const Tokenizer t = Tokenizer::train("ab ab ab cd", 257 + 3);
  ASSERT_EQ(t.merges().size(), 3u);
  EXPECT_EQ(t.merges()[0], Merge('a', 'b'));
  EXPECT_EQ(t.merges()[1], Merge(' ', 256));            // " " + "ab", now the most frequent
  EXPECT_EQ(t.merges()[2], Merge(' ', 'c'));            // tie with (c,d): the smaller pair wins
  EXPECT_EQ(t.token_bytes(257), " ab");
  EXPECT_EQ(t.vocab_size(), 260u);
  EXPECT_EQ(t.eot_id(), 259u);
  EXPECT_EQ(t.token_bytes(t.eot_id()), "<|endoftext|>");
}

TEST(TokenizerTrain, MatchesCountsOfANaiveTrainer) {
  // Naive trainer: recount every pair over all chunks before each merge.
  const std::string text = small_corpus();
  std::vector<std::vector<TokenId>> words;
  for (std::string_view c : split_chunks(text)) {
    std::vector<TokenId> w;
    for (const char ch : c) w.push_back(static_cast<unsigned char>(ch));
    words.push_back(w);
  }
  std::vector<Merge> expected;
  for (int m = 0; m < 60; ++m) {
    std::map<Merge, int64_t> counts;
    for (const auto& w : words) {
      for (size_t i = 0; i + 1 < w.size(); ++i) ++counts[{w[i], w[i + 1]}];
    }
    if (counts.empty()) break;
    Merge best{};
    int64_t best_count = 0;
    for (const auto& [pair, n] : counts) {  // std::map order: the first max is the smallest pair
      if (n > best_count) {
        best = pair;
        best_count = n;
      }
    }
    expected.push_back(best);
    const TokenId id = TokenId(kNumByteTokens + m);
    for (auto& w : words) {
      std::vector<TokenId> next;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && Merge(w[i], w[i + 1]) == best) {
          next.push_back(id);
          ++i;
        } else {
          next.push_back(w[i]);
        }
      }
      w = next;
    }
  }
  const Tokenizer t = Tokenizer::train(text, 257 + 60);
  EXPECT_EQ(t.merges(), expected);
}

TEST(TokenizerTrain, IsDeterministicAndStopsWhenNothingIsLeft) {
  const std::string text = small_corpus();
  const Tokenizer a = Tokenizer::train(text, 350);
  const Tokenizer b = Tokenizer::train(text, 350);
  EXPECT_EQ(a.merges(), b.merges());
  EXPECT_EQ(a.vocab_size(), 350u);

  const Tokenizer tiny = Tokenizer::train("abc abc", 1000);  // "abc", " abc": 3 merges make both whole
  EXPECT_EQ(tiny.merges().size(), 3u);
  EXPECT_EQ(tiny.vocab_size(), 260u);
  EXPECT_EQ(tiny.encode("abc abc"), (std::vector<TokenId>{tiny.eot_id() - 2, tiny.eot_id() - 1}));

  EXPECT_THROW(Tokenizer::train(text, 256), std::invalid_argument);
  EXPECT_EQ(Tokenizer::train(text, 257).merges().size(), 0u);
}

TEST(TokenizerTrain, NeverLearnsAcrossEndOfText) {
  const std::string text = "hello<|endoftext|>hello<|endoftext|>hello<|endoftext|>";
  const Tokenizer t = Tokenizer::train(text, 300);
  for (TokenId id = kNumByteTokens; id < t.eot_id(); ++id) {
    EXPECT_EQ(t.token_bytes(id).find_first_of("<|>"), std::string::npos) << t.token_bytes(id);
  }
  EXPECT_EQ(t.encode(text), (std::vector<TokenId>{t.eot_id() - 1, t.eot_id(), t.eot_id() - 1, t.eot_id(),
                                                  t.eot_id() - 1, t.eot_id()}));
}

TEST_F(TokenizerFiles, TrainFilesEqualsTrainOnTheText) {
  const std::string a = write("a.txt", small_corpus()), b = write("b.txt", "More text, more words.\n");
  const Tokenizer from_files = Tokenizer::train_files({a, b}, 320);
  const Tokenizer from_text = Tokenizer::train(small_corpus() + "<|endoftext|>More text, more words.\n", 320);
  EXPECT_EQ(from_files.merges(), from_text.merges());
  expect_throw_with<std::runtime_error>([&] { Tokenizer::train_files({path("missing.txt")}, 300); },
                                        {"missing.txt"});
}

// ---- encoding ----

TEST(TokenizerEncode, RoundTripsArbitraryBytes) {
  const Tokenizer t = Tokenizer::train(small_corpus(), 350);
  std::mt19937 rng(2);
  for (int trial = 0; trial < 40; ++trial) {
    // Random bytes (NUL, invalid UTF-8, all of 0..255), mixed with corpus text so merges apply.
    std::string text = random_bytes(rng, rng() % 200);
    text += small_corpus().substr(rng() % 100, 80);
    text += std::string("\0\xff\xfe\xc3(", 5);
    const auto ids = t.encode(text);
    EXPECT_EQ(t.decode(ids), text);
    EXPECT_EQ(t.decode(t.encode_ordinary(text)), text);
    for (const TokenId id : ids) EXPECT_LT(id, t.vocab_size());
  }
  EXPECT_TRUE(t.encode("").empty());
  EXPECT_EQ(t.decode(std::vector<TokenId>{}), "");
}

TEST(TokenizerEncode, MatchesReferenceBpeOnShortAndLongChunks) {
  const std::string corpus = small_corpus() + std::string(80, ' ') + "x" + std::string(70, '=') + "\n" +
                             "abababababababababababababababababababababab\n";
  const Tokenizer t = Tokenizer::train(corpus, 420);
  std::vector<std::string> texts = {small_corpus(), std::string(100, ' ') + "a", std::string(200, '='),
                                    "abababababababababababababababababababababababababababababab",
                                    "Lily's mom and Lily's dog played in the park all day long."};
  std::mt19937 rng(3);
  for (int i = 0; i < 10; ++i) texts.push_back(random_bytes(rng, 100));
  for (const std::string& text : texts) {
    EXPECT_EQ(t.encode(text), reference_encode(text, t.merges())) << text;
  }
  // Merges shorten the text they were learned on.
  EXPECT_LT(t.encode(small_corpus()).size(), small_corpus().size() / 2);
}

TEST(TokenizerEncode, SpecialTokenIsRecognizedOnlyByEncode) {
  const Tokenizer t = Tokenizer::train(small_corpus(), 300);
  const std::string text = "Lily<|endoftext|>The end.<|endoftext|><|endoftext|>";
  const auto ids = t.encode(text);
  std::vector<TokenId> expected = t.encode_ordinary("Lily");
  expected.push_back(t.eot_id());
  const auto tail = t.encode_ordinary("The end.");
  expected.insert(expected.end(), tail.begin(), tail.end());
  expected.push_back(t.eot_id());
  expected.push_back(t.eot_id());
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(t.decode(ids), text);

  const auto ordinary = t.encode_ordinary(text);
  EXPECT_EQ(std::count(ordinary.begin(), ordinary.end(), t.eot_id()), 0);
  EXPECT_EQ(t.decode(ordinary), text);
  // A partial marker is plain text.
  const auto partial = t.encode("<|endoftext|");
  EXPECT_EQ(std::count(partial.begin(), partial.end(), t.eot_id()), 0);
}

TEST(TokenizerEncode, BigInputsAreEncodedInParallelInOrder) {
  // About 400 KB: above the parallel threshold, many pieces, several progress reports.
  const Tokenizer t = Tokenizer::train(small_corpus(), 400);
  std::mt19937 rng(4);
  std::string text;
  while (text.size() < 400000) {
    text += small_corpus().substr(rng() % 50);
    if (rng() % 3 == 0) text += "<|endoftext|>\n";
    if (rng() % 7 == 0) text += "   \n\n  indented " + std::to_string(rng()) + "\n";
  }
  std::vector<std::pair<size_t, size_t>> reports;
  const auto ids = t.encode(text, [&](size_t done, size_t total) { reports.emplace_back(done, total); });
  EXPECT_EQ(t.decode(ids), text);

  // The same as encoding each "<|endoftext|>"-separated part serially.
  std::vector<TokenId> expected;
  size_t start = 0;
  while (true) {
    const size_t at = text.find(kEndOfText, start);
    const auto part = reference_encode(std::string_view(text).substr(start, at - start), t.merges());
    expected.insert(expected.end(), part.begin(), part.end());
    if (at == std::string::npos) break;
    expected.push_back(t.eot_id());
    start = at + kEndOfText.size();
  }
  EXPECT_EQ(ids, expected);

  ASSERT_GE(reports.size(), 2u);
  for (size_t i = 1; i < reports.size(); ++i) EXPECT_GT(reports[i].first, reports[i - 1].first);
  EXPECT_EQ(reports.back(), std::make_pair(text.size(), text.size()));
}

TEST(TokenizerEncode, CuttingBigInputsNeverChangesChunks) {
  // Whitespace runs ending in a newline everywhere: a cut inside one would split a chunk.
  const Tokenizer t = Tokenizer::train("ab  \ncd \n\nef\n  gh\n", 280);
  std::string text;
  for (int i = 0; text.size() < 300000; ++i) text += i % 2 ? "ab  \ncd \n\nef\n" : "gh \n  \nij\n";
  EXPECT_EQ(t.encode(text), reference_encode(text, t.merges()));
}

TEST(TokenizerDecode, RejectsIdsOutsideTheVocabulary) {
  const Tokenizer t;
  EXPECT_EQ(t.vocab_size(), 257u);
  EXPECT_EQ(t.decode(std::vector<TokenId>{'h', 'i', 256}), "hi<|endoftext|>");
  expect_throw_with<std::invalid_argument>([&] { t.decode(std::vector<TokenId>{1, 257}); },
                                           {"Tokenizer::decode", "token 1", "257", "vocabulary of 257"});
  EXPECT_THROW(t.token_bytes(999), std::invalid_argument);
}

TEST(TokenizerFromMerges, ValidatesOrderAndDuplicates) {
  EXPECT_EQ(Tokenizer::from_merges({{'a', 'b'}, {256, 'c'}}).token_bytes(257), "abc");
  expect_throw_with<std::invalid_argument>([] { Tokenizer::from_merges({{'a', 257}}); }, {"merge 0", "not defined"});
  expect_throw_with<std::invalid_argument>([] { Tokenizer::from_merges({{'a', 'b'}, {'a', 'b'}}); },
                                           {"merge 1", "repeats"});
}

// ---- stories files ----

TEST_F(TokenizerFiles, StoriesFileKeepsTheTextAndSeparators) {
  const std::string content =
      "One day, Lily found a ball.\nShe played.\n<|endoftext|>\nTom said <|endoftext|> aloud.\n"
      "<|endoftext|>\n<|endoftext|>x\nLast story without a newline";
  const std::string p = write("stories.txt", content);
  const Tokenizer t = Tokenizer::train(small_corpus(), 300);
  size_t last_done = 0;
  const auto ids = encode_stories_file(t, p, [&](size_t done, size_t total) {
    EXPECT_EQ(total, content.size());
    last_done = done;
  });
  EXPECT_EQ(last_done, content.size());
  EXPECT_EQ(t.decode(ids), content);
  // Two separator lines; the mid-line marker and "<|endoftext|>x" are story text.
  EXPECT_EQ(std::count(ids.begin(), ids.end(), t.eot_id()), 2);

  std::vector<TokenId> expected = t.encode_ordinary("One day, Lily found a ball.\nShe played.\n");
  expected.push_back(t.eot_id());
  const auto second = t.encode_ordinary("\nTom said <|endoftext|> aloud.\n");
  expected.insert(expected.end(), second.begin(), second.end());
  expected.push_back(t.eot_id());
  const auto rest = t.encode_ordinary("\n<|endoftext|>x\nLast story without a newline");
  expected.insert(expected.end(), rest.begin(), rest.end());
  EXPECT_EQ(ids, expected);

  expect_throw_with<std::runtime_error>([&] { encode_stories_file(t, path("none.txt")); }, {"none.txt"});
}

// A file written on Windows (or through a CRLF checkout) separates its stories just the same.
TEST_F(TokenizerFiles, StoriesFileWithCrlfLineEndingsHasTheSameSeparators) {
  const std::string lf = "One day, Lily found a ball.\nShe played.\n<|endoftext|>\nTom ran.\n<|endoftext|>\nThe end.\n";
  std::string crlf;
  for (char c : lf) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  const Tokenizer t = Tokenizer::train(small_corpus(), 300);
  const auto from_lf = encode_stories_file(t, write("lf.txt", lf));
  const auto from_crlf = encode_stories_file(t, write("crlf.txt", crlf));
  EXPECT_EQ(std::count(from_lf.begin(), from_lf.end(), t.eot_id()), 2);
  EXPECT_EQ(std::count(from_crlf.begin(), from_crlf.end(), t.eot_id()), 2);
  EXPECT_EQ(t.decode(from_crlf), crlf);  // the text as it is, line endings included
  // The same tokens as the LF file where the line endings are not involved: the stories' first lines.
  const auto first = t.encode_ordinary("One day, Lily found a ball.");
  EXPECT_TRUE(std::equal(first.begin(), first.end(), from_crlf.begin()));
}

// 40 merges, each of the previous token with itself, would make a token of 2^41 bytes from a file of
// a few hundred: refused before anything is built, quickly.
TEST_F(TokenizerFiles, MergesThatDoubleTheirTokenAreRefusedBeforeBuildingThem) {
  std::string merges = "[97, 97]";
  for (int i = 1; i < 40; ++i) merges += ", [" + std::to_string(255 + i) + ", " + std::to_string(255 + i) + "]";
  const std::string p = write("bomb.json", R"({"type": "byte-bpe", "version": 1, "merges": [)" + merges +
                                               R"(], "special_tokens": {"<|endoftext|>": 296}, "vocab_size": 297})");
  EXPECT_LT(util::read_file(p).size(), 700u);
  const auto t0 = std::chrono::steady_clock::now();
  expect_throw_with<std::runtime_error>([&] { Tokenizer::load(p); },
                                        {"Tokenizer::load", p, "merge 20", "a token of 2097152 bytes", "limit of 1048576"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  // The total is bounded too: many tokens of a size allowed one by one.
  std::vector<Merge> wide = {{'a', 'a'}};
  for (TokenId i = 0; i < 10; ++i) wide.emplace_back(256 + i, 256 + i);  // up to 2^11 bytes
  for (TokenId i = 0; i < 40000; ++i) wide.emplace_back(266, i);  // over 2 KiB each
  expect_throw_with<std::invalid_argument>([&] { Tokenizer::from_merges(wide); }, {"add up past the limit of 67108864"});
}

// ---- save / load ----

TEST_F(TokenizerFiles, SaveLoadRoundTrip) {
  const Tokenizer t = Tokenizer::train(small_corpus(), 330);
  const std::string p = path("tok.json");
  t.save(p);
  const Tokenizer u = Tokenizer::load(p);
  EXPECT_EQ(u.merges(), t.merges());
  EXPECT_EQ(u.vocab_size(), 330u);
  EXPECT_EQ(u.encode(small_corpus()), t.encode(small_corpus()));

  const std::string json = util::read_file(p);
  EXPECT_EQ(json.rfind("{\"type\":\"byte-bpe\",\"version\":1,\"merges\":[[", 0), 0u) << json.substr(0, 80);
  EXPECT_NE(json.find("\"special_tokens\":{\"<|endoftext|>\":329},\"vocab_size\":330}"), std::string::npos);

  // No merges at all is a valid tokenizer too.
  Tokenizer().save(p);
  EXPECT_EQ(Tokenizer::load(p).vocab_size(), 257u);
}

TEST_F(TokenizerFiles, LoadRejectsEveryMalformedFile) {
  const std::string good_tail = R"("special_tokens": {"<|endoftext|>": 258}, "vocab_size": 259})";
  const std::string good_head = R"({"type": "byte-bpe", "version": 1, "merges": [[97, 98], [256, 99]], )";
  ASSERT_EQ(Tokenizer::from_json(good_head + good_tail).vocab_size(), 259u);

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not valid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {R"({"version": 1, "merges": [], "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 257})",
       "missing field \"type\""},
      {R"({"type": "byte-bpe", "merges": [], "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 257})",
       "missing field \"version\""},
      {R"({"type": "byte-bpe", "version": 1, "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 257})",
       "missing field \"merges\""},
      {R"({"type": "byte-bpe", "version": 1, "merges": [], "vocab_size": 257})", "missing field \"special_tokens\""},
      {R"({"type": "byte-bpe", "version": 1, "merges": [], "special_tokens": {"<|endoftext|>": 256}})",
       "missing field \"vocab_size\""},
      {R"({"type": "byte-bpe", "type": "byte-bpe", "version": 1, "merges": [], "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 257})",
       "duplicate field \"type\""},
      {R"({"type": "byte-bpe", "version": 1, "merges": [], "special_tokens": {"<|endoftext|>": 256, "<|endoftext|>": 256}, "vocab_size": 257})",
       "duplicate field \"<|endoftext|>\""},
      {R"({"type": "wordpiece", "version": 1, "merges": [], "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 257})",
       "expected \"byte-bpe\""},
      {R"({"type": 3, "version": 1, "merges": [], "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 257})",
       "\"type\" must be a string"},
      {R"({"type": "byte-bpe", "version": 2, "merges": [], "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 257})",
       "unsupported \"version\" 2"},
      {R"({"type": "byte-bpe", "version": "1", "merges": [], "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 257})",
       "\"version\" must be a non-negative integer"},
      {R"({"type": "byte-bpe", "version": 1, "merges": {}, "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 257})",
       "\"merges\" must be an array"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [[97]], "special_tokens": {"<|endoftext|>": 257}, "vocab_size": 258})",
       "merge 0 must be an array of two token ids"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [[97, -1]], "special_tokens": {"<|endoftext|>": 257}, "vocab_size": 258})",
       "merge 0's second id must be a non-negative integer"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [[97.5, 98]], "special_tokens": {"<|endoftext|>": 257}, "vocab_size": 258})",
       "merge 0's first id must be a non-negative integer"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [["a", 98]], "special_tokens": {"<|endoftext|>": 257}, "vocab_size": 258})",
       "merge 0's first id must be a non-negative integer"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [[97, 98], [257, 99]], "special_tokens": {"<|endoftext|>": 258}, "vocab_size": 259})",
       "merge 1 [257,99] references token 257, not defined yet"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [[97, 98], [97, 98]], "special_tokens": {"<|endoftext|>": 258}, "vocab_size": 259})",
       "repeats an earlier merge"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [], "special_tokens": {}, "vocab_size": 257})",
       "lacks <|endoftext|>"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [], "special_tokens": {"<|endoftext|>": 0}, "vocab_size": 257})",
       "<|endoftext|> has id 0, expected 256"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [], "special_tokens": {"<|pad|>": 256}, "vocab_size": 257})",
       "unknown special token \"<|pad|>\""},
      {R"({"type": "byte-bpe", "version": 1, "merges": [], "special_tokens": [256], "vocab_size": 257})",
       "\"special_tokens\" must be an object"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [], "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 300})",
       "\"vocab_size\" is 300"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [], "special_tokens": {"<|endoftext|>": 256}, "vocab_size": true})",
       "\"vocab_size\" must be a non-negative integer"},
      {R"({"type": "byte-bpe", "version": 1, "merges": [], "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 257, "extra": 1})",
       "unexpected field \"extra\""},
      {R"({"type": "byte-bpe", "version": 1, "merges": [], "special_tokens": {"<|endoftext|>": 256}, "vocab_size": 1e400})",
       "field \"vocab_size\": number out of range"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].first);
    const std::string p = write("bad" + std::to_string(i) + ".json", cases[i].first);
    expect_throw_with<std::runtime_error>([&] { Tokenizer::load(p); }, {"Tokenizer::load", p, cases[i].second});
  }
  expect_throw_with<std::runtime_error>([&] { Tokenizer::load(path("absent.json")); },
                                        {"Tokenizer::load", "absent.json"});
}

}  // namespace
}  // namespace mvgpt::text
