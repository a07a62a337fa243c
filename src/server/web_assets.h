// The chat page's files (web/), embedded into the binary at build time by cmake/embed_web.cmake,
// so `sluice serve` needs no files beside the binary and fetches nothing at runtime.
#pragma once

#include <string_view>
#include <vector>

namespace sluice::server {

struct WebAsset {
    std::string_view path;   // "/index.html"
    std::string_view bytes;  // the file's contents (static storage)
};

const std::vector<WebAsset>& web_assets();

// The embedded file served at `path` ("/vendor/katex/katex.min.css"), or null. The route table
// asks this to decide that a GET is for the page (which needs no API key): a path is a web
// asset exactly when web/ held that file at build time.
const WebAsset* find_web_asset(std::string_view path);

}  // namespace sluice::server
