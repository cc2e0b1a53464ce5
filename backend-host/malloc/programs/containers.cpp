// A C++17 program that leans on the standard library's containers, strings and regular
// expressions: what g++ compiles in the tests and the benchmark (the compiler's own
// allocations are what is measured), and what the compiled program prints (the same bytes
// on every run). Usage: ./containers [N]
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

namespace {

struct Rng {
    std::uint64_t s;
    std::uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
};

using Value = std::variant<long, double, std::string>;

std::string show(const Value& v) {
    return std::visit(
        [](const auto& x) {
            std::ostringstream o;
            o << x;
            return o.str();
        },
        v);
}

std::optional<long> parse(std::string_view s) {
    long v = 0;
    if (s.empty()) return std::nullopt;
    for (char c : s) {
        if (c < '0' || c > '9') return std::nullopt;
        v = v * 10 + (c - '0');
    }
    return v;
}

struct Node {
    std::string name;
    std::vector<std::unique_ptr<Node>> kids;
    std::size_t size() const {
        return std::accumulate(kids.begin(), kids.end(), std::size_t{1},
                               [](std::size_t a, const auto& k) { return a + k->size(); });
    }
};

std::unique_ptr<Node> tree(Rng& r, int depth) {
    auto n = std::make_unique<Node>();
    n->name = "n" + std::to_string(r.next() % 1000);
    if (depth > 0)
        for (std::uint64_t i = 0, k = r.next() % 4; i < k; i++) n->kids.push_back(tree(r, depth - 1));
    return n;
}

}  // namespace

int main(int argc, char** argv) {
    const long n = argc > 1 ? std::atol(argv[1]) : 100000;
    Rng r{88172645463325252ULL};
    std::vector<std::string> words;
    for (long i = 0; i < n; i++) {
        std::string w;
        static const char* const syllables[] = {"ka", "lo", "mi", "ne", "ru", "sa"};
        for (std::uint64_t k = 1 + r.next() % 4; k > 0; k--) w += syllables[r.next() % 6];
        words.push_back(w);
    }
    std::unordered_map<std::string, long> counts;
    std::map<long, std::set<std::string>> by_count;
    for (const auto& w : words) counts[w]++;
    for (const auto& [w, c] : counts) by_count[c].insert(w);
    std::cout << "distinct " << counts.size() << ", most frequent " << by_count.rbegin()->first
              << " " << *by_count.rbegin()->second.begin() << "\n";

    std::vector<Value> values;
    for (long i = 0; i < 1000; i++) {
        switch (r.next() % 3) {
            case 0: values.emplace_back(static_cast<long>(r.next() % 100000)); break;
            case 1: values.emplace_back(static_cast<double>(r.next() % 1000) / 8.0); break;
            default: values.emplace_back(words[r.next() % words.size()]); break;
        }
    }
    std::string joined;
    for (const auto& v : values) joined += show(v) + ",";
    long numbers = 0;
    std::stringstream in(joined);
    for (std::string field; std::getline(in, field, ',');)
        if (auto v = parse(field)) numbers += *v;
    std::cout << "values " << joined.size() << " " << numbers << "\n";

    std::regex pat("(ka|lo)(mi|ne)+");
    long matches = 0;
    for (std::size_t i = 0; i < words.size() && i < 20000; i++)
        if (std::regex_search(words[i], pat)) matches++;
    std::cout << "regex matches " << matches << "\n";

    auto root = tree(r, 8);
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    std::function<std::size_t(std::size_t)> sum = [&](std::size_t i) {
        return i == 0 ? 0 : words[i % words.size()].size() + sum(i - 1);
    };
    std::cout << "tree " << root->size() << ", unique " << words.size() << ", sum " << sum(500)
              << "\n";
    return 0;
}
