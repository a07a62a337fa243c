// Model folders and MODEL arguments (see model_store.h).
#include "convert/model_store.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

namespace sluice::convert {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
}

std::string home() {
    std::string h = env("HOME");
    return h.empty() ? std::string("/") : h;
}

bool hub_name_ok(std::string_view s) {
    if (s.empty() || s.size() > 96 || s.front() == '.' || s.find("..") != std::string_view::npos)
        return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
}

bool is_commit(std::string_view s) {
    return s.size() == 40 && std::all_of(s.begin(), s.end(),
                                         [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

std::string first_line(const fs::path& file) {
    std::ifstream in(file);
    std::string line;
    if (!in || !std::getline(in, line)) return {};
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    return line;
}

// The hub cache's folder for a repository: models--ORG--NAME.
fs::path hf_repo_dir(const std::string& repo) {
    std::string name = "models--" + repo;
    for (size_t at = name.find('/'); at != std::string::npos; at = name.find('/', at))
        name.replace(at, 1, "--");
    return fs::path(hf_hub_cache()) / name;
}

// The snapshot folder of `id` in the hub cache, or "" when it is not there.
std::string hf_snapshot(const ModelId& id, std::string* commit) {
    const fs::path repo = hf_repo_dir(id.repo);
    std::string sha = is_commit(id.revision) ? id.revision : first_line(repo / "refs" / id.revision);
    if (!is_commit(sha)) return {};
    const fs::path snap = repo / "snapshots" / sha;
    std::error_code ec;
    if (!fs::exists(snap / "config.json", ec)) return {};
    if (commit) *commit = sha;
    return snap.string();
}

uint64_t tree_bytes(const fs::path& dir) {
    uint64_t total = 0;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
        std::error_code e2;
        if (fs::is_regular_file(it->path(), e2)) total += fs::file_size(it->path(), e2);  // links followed
    }
    return total;
}

// The commit a finished pull recorded ("hf:ORG/NAME@COMMIT" in .pull-progress.json), or "".
std::string pulled_commit(const fs::path& dir) {
    std::ifstream in(dir / ".pull-progress.json");
    if (!in) return {};
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("source") || !j["source"].is_string()) return {};
    const std::string s = j["source"].get<std::string>();
    const size_t at = s.rfind('@');
    return at == std::string::npos ? std::string() : s.substr(at + 1);
}

}  // namespace

std::optional<ModelId> parse_model_id(std::string_view arg) {
    ModelId id;
    std::string_view repo = arg;
    if (const size_t at = arg.find('@'); at != std::string_view::npos) {
        repo = arg.substr(0, at);
        const std::string_view rev = arg.substr(at + 1);
        if (rev.empty() || rev.size() > 128 || rev.find("..") != std::string_view::npos ||
            rev.front() == '/' || !std::all_of(rev.begin(), rev.end(), [](char c) {
                return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
                       c == '/';
            }))
            return std::nullopt;
        id.revision = std::string(rev);
    }
    const size_t slash = repo.find('/');
    if (slash == std::string_view::npos || repo.find('/', slash + 1) != std::string_view::npos)
        return std::nullopt;
    if (!hub_name_ok(repo.substr(0, slash)) || !hub_name_ok(repo.substr(slash + 1))) return std::nullopt;
    id.repo = std::string(repo);
    return id;
}

std::string models_root() {
    if (std::string d = env("SLUICE_MODELS"); !d.empty()) return d;
    if (std::string x = env("XDG_DATA_HOME"); !x.empty()) return (fs::path(x) / "sluice" / "models").string();
    return (fs::path(home()) / ".local" / "share" / "sluice" / "models").string();
}

std::string hf_hub_cache() {
    if (std::string d = env("HF_HUB_CACHE"); !d.empty()) return d;
    if (std::string h = env("HF_HOME"); !h.empty()) return (fs::path(h) / "hub").string();
    if (std::string x = env("XDG_CACHE_HOME"); !x.empty())
        return (fs::path(x) / "huggingface" / "hub").string();
    return (fs::path(home()) / ".cache" / "huggingface" / "hub").string();
}

std::string hf_token() {
    if (std::string t = env("HF_TOKEN"); !t.empty()) return t;
    fs::path file;
    if (std::string p = env("HF_TOKEN_PATH"); !p.empty())
        file = p;
    else if (std::string h = env("HF_HOME"); !h.empty())
        file = fs::path(h) / "token";
    else
        file = fs::path(home()) / ".cache" / "huggingface" / "token";
    return first_line(file);
}

std::string pull_dir(const ModelId& id) {
    std::string leaf = id.repo.substr(id.repo.find('/') + 1);
    if (id.revision != "main") leaf += "@" + id.revision;
    return (fs::path(models_root()) / id.repo.substr(0, id.repo.find('/')) / leaf).string();
}

std::string hf_packed_dir(const ModelId& id, const std::string& snapshot_dir) {
    std::string repo = id.repo;
    repo.replace(repo.find('/'), 1, "--");
    const std::string commit = fs::path(snapshot_dir).lexically_normal().filename().string();
    return (fs::path(models_root()) / ".hf-packed" / (repo + "@" + commit)).string();
}

Expected<ResolvedModel> resolve_model(const std::string& arg) {
    std::error_code ec;
    if (!arg.empty() && fs::exists(arg, ec)) return ResolvedModel{arg, "path", std::nullopt};
    const std::optional<ModelId> id = parse_model_id(arg);
    if (!id)
        return error(ErrorCode::kNotFound,
                     "'" + arg + "' is not a file or folder, nor a model id (ORG/NAME[@REV])");
    const std::string mine = pull_dir(*id);
    if (fs::exists(fs::path(mine) / "manifest.json", ec)) return ResolvedModel{mine, "models", id};
    if (std::string snap = hf_snapshot(*id, nullptr); !snap.empty())
        return ResolvedModel{snap, "hf-cache", id};
    std::string msg = "model " + id->str() + " is not installed: not in sluice's models folder (" + mine;
    if (fs::exists(mine, ec)) msg += ": an unfinished pull; run `sluice pull " + id->str() + "` to resume it";
    msg += ") nor in the Hugging Face cache (" + (hf_repo_dir(id->repo) / "snapshots").string() + ")";
    return error(ErrorCode::kNotFound, msg);
}

std::vector<InstalledModel> list_models() {
    std::vector<InstalledModel> out;
    std::error_code ec;
    const fs::path root = models_root();
    for (fs::directory_iterator org(root, ec), end; !ec && org != end; org.increment(ec)) {
        if (!org->is_directory()) continue;
        std::error_code e2;
        for (fs::directory_iterator m(org->path(), e2); !e2 && m != end; m.increment(e2)) {
            if (!m->is_directory()) continue;
            const std::string leaf = m->path().filename().string();
            const auto id =
                parse_model_id(org->path().filename().string() + "/" + leaf.substr(0, leaf.find('@')) +
                               (leaf.find('@') == std::string::npos ? "" : leaf.substr(leaf.find('@'))));
            if (!id) continue;
            InstalledModel im;
            im.id = id->str();
            im.where = "models";
            im.dir = m->path().string();
            im.commit = pulled_commit(m->path());
            im.bytes = tree_bytes(m->path());
            std::error_code e3;
            im.complete = fs::exists(m->path() / "manifest.json", e3);
            out.push_back(std::move(im));
        }
    }
    const fs::path hub = hf_hub_cache();
    for (fs::directory_iterator repo(hub, ec), end; !ec && repo != end; repo.increment(ec)) {
        const std::string name = repo->path().filename().string();
        if (!repo->is_directory() || !name.starts_with("models--")) continue;
        std::string rest = name.substr(8);
        const size_t sep = rest.find("--");
        if (sep == std::string::npos) continue;
        const std::string repo_id = rest.substr(0, sep) + "/" + rest.substr(sep + 2);
        if (!parse_model_id(repo_id)) continue;
        std::error_code e2;
        for (fs::directory_iterator ref(repo->path() / "refs", e2); !e2 && ref != end; ref.increment(e2)) {
            ModelId id{repo_id, ref->path().filename().string()};
            std::string commit;
            const std::string snap = hf_snapshot(id, &commit);
            InstalledModel im;
            im.id = id.str();
            im.where = "hf-cache";
            im.dir = snap.empty() ? (repo->path() / "snapshots").string() : snap;
            im.commit = commit.empty() ? first_line(ref->path()) : commit;
            im.complete = !snap.empty();
            im.bytes = snap.empty() ? 0 : tree_bytes(snap);
            out.push_back(std::move(im));
        }
    }
    std::sort(out.begin(), out.end(), [](const InstalledModel& a, const InstalledModel& b) {
        return a.id != b.id ? a.id < b.id : a.where > b.where;  // sluice's folder first
    });
    return out;
}

Expected<std::string> remove_model(const ModelId& id) {
    const std::string dir = pull_dir(id);
    std::error_code ec;
    if (!fs::exists(dir, ec)) {
        if (!hf_snapshot(id, nullptr).empty())
            return error(ErrorCode::kInvalidArgument,
                         "model " + id.str() + " is only in the Hugging Face cache (" +
                             hf_repo_dir(id.repo).string() +
                             "), which sluice does not delete from; use `hf cache delete`");
        return error(ErrorCode::kNotFound,
                     "model " + id.str() + " is not in sluice's models folder (" + dir + ")");
    }
    fs::remove_all(dir, ec);
    if (ec) return error(ErrorCode::kIo, "cannot delete '" + dir + "': " + ec.message());
    // An organisation folder left empty goes too.
    const fs::path org = fs::path(dir).parent_path();
    if (fs::is_empty(org, ec)) fs::remove(org, ec);
    return dir;
}

}  // namespace sluice::convert
