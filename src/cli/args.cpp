#include "cli/args.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command.h"

namespace sluice::cli {

Expected<std::vector<int32_t>> parse_ids(const std::string& text) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && (text[i] == ',' || std::isspace(static_cast<unsigned char>(text[i])))) ++i;
        if (i == text.size()) break;
        size_t j = i;
        while (j < text.size() && text[j] != ',' && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
        std::string item = text.substr(i, j - i);
        char* end = nullptr;
        long long v = std::strtoll(item.c_str(), &end, 10);
        if (end == item.c_str() || *end != '\0' || v < 0 || v > INT32_MAX)
            return error(ErrorCode::kInvalidArgument,
                         "token id '" + item + "' is not a non-negative integer");
        ids.push_back(static_cast<int32_t>(v));
        i = j;
    }
    if (ids.empty()) return error(ErrorCode::kInvalidArgument, "no token ids given");
    return ids;
}

Expected<uint64_t> parse_size(const std::string& text) {
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || v < 0 || !std::isfinite(v))
        return error(ErrorCode::kInvalidArgument,
                     "size '" + text + "' is not a number with an optional K/M/G/T suffix");
    std::string suffix(end);
    for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    double mult = 1;
    if (suffix.empty() || suffix == "B")
        mult = 1;
    else if (suffix == "K" || suffix == "KB" || suffix == "KIB")
        mult = 1024.0;
    else if (suffix == "M" || suffix == "MB" || suffix == "MIB")
        mult = 1024.0 * 1024;
    else if (suffix == "G" || suffix == "GB" || suffix == "GIB")
        mult = 1024.0 * 1024 * 1024;
    else if (suffix == "T" || suffix == "TB" || suffix == "TIB")
        mult = 1024.0 * 1024 * 1024 * 1024;
    else
        return error(ErrorCode::kInvalidArgument,
                     "size '" + text + "' has an unknown suffix '" + std::string(end) + "'");
    return static_cast<uint64_t>(v * mult);
}

std::string read_input(const std::string& path, const std::string& what) {
    std::ostringstream ss;
    if (path == "-") {
        ss << std::cin.rdbuf();
        return ss.str();
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw CliError("cannot read " + what + " '" + path + "'");
    ss << in.rdbuf();
    return ss.str();
}

void write_output(const std::string& path, const std::string& text, const std::string& what) {
    if (path == "-") {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        return;
    }
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    if (!out) throw CliError("cannot write " + what + " '" + path + "'");
}

}  // namespace sluice::cli
