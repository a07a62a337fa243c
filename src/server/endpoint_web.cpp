// GET / and the web page's other files, served from the bytes embedded at build time.
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
    return "application/octet-stream";
}
}  // namespace

void handle_web(ServerContext&, const HttpRequest& req, HttpResponse& res) {
    const std::string path = req.path == "/" ? "/index.html" : req.path;
    for (const WebAsset& a : web_assets()) {
        if (a.path == path) {
            res.set_content(std::string(a.bytes), mime_type(path));
            res.set_header("Cache-Control", "no-cache");
            return;
        }
    }
    send_error(res, ApiError{404, "no such page: " + req.path, "invalid_request_error", "", "not_found"});
}

}  // namespace sluice::server
