// GET / and the web page's other files (its modules, styles, and the libraries and fonts vendored
// under web/vendor/), served from the bytes embedded at build time.
//
// Every response carries a Content-Security-Policy that lets the page load and fetch only from this
// server: the page renders untrusted model output (sanitised by DOMPurify), and the policy is the
// second wall, so an injected inline script or event handler would not run and an injected image
// could not leak a request elsewhere. Inline styles stay allowed: KaTeX positions its glyphs with
// style attributes.
#include "server/endpoints.h"
#include "server/transport.h"
#include "server/web_assets.h"

namespace sluice::server {

namespace {
const char* mime_type(std::string_view path) {
    if (path.ends_with(".html")) return "text/html; charset=utf-8";
    if (path.ends_with(".js")) return "text/javascript; charset=utf-8";
    if (path.ends_with(".css")) return "text/css; charset=utf-8";
    if (path.ends_with(".svg")) return "image/svg+xml";
    if (path.ends_with(".png")) return "image/png";
    if (path.ends_with(".woff2")) return "font/woff2";
    if (path.ends_with(".json")) return "application/json";
    if (path.ends_with("LICENSE") || path.ends_with(".txt")) return "text/plain; charset=utf-8";
    return "application/octet-stream";
}

constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'";
}  // namespace

const WebAsset* find_web_asset(std::string_view path) {
    for (const WebAsset& a : web_assets())
        if (a.path == path) return &a;
    return nullptr;
}

void handle_web(ServerContext&, const HttpRequest& req, HttpResponse& res) {
    const std::string path = req.path == "/" ? "/index.html" : req.path;
    const WebAsset* a = find_web_asset(path);
    if (a == nullptr)
        return send_error(
            res, ApiError{404, "no such page: " + req.path, "invalid_request_error", "", "not_found"});
    res.set_content(std::string(a->bytes), mime_type(path));
    res.set_header("Cache-Control", "no-cache");
    res.set_header("Content-Security-Policy", kContentSecurityPolicy);
    res.set_header("X-Content-Type-Options", "nosniff");
}

}  // namespace sluice::server
