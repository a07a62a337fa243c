#include "convert/puller.h"

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "convert/model_store.h"
#include "convert/pack_plan.h"
#include "convert/pack_stream.h"
#include "format/hub_api.h"
#include "format/safetensors.h"
#include "io/http.h"
#include "io/mapped_file.h"
#include "model/config.h"

namespace sluice::convert {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSourceDir = ".source";
constexpr const char* kRecordName = ".pull-progress.json";

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The commit of an earlier, interrupted pull of the same repository and revision, if any.
std::string pinned_commit(const std::string& source_dir, const PullOptions& o) {
    auto text = io::read_text_file((fs::path(source_dir) / "pin.json").string());
    if (!text.has_value()) return "";
    json j = json::parse(*text, nullptr, false);
    if (j.is_discarded() || j.value("repo", "") != o.repo || j.value("revision", "") != o.revision) return "";
    return j.value("commit", "");
}

// Downloads a small file into the staging folder, checked against the listing's size (and, for
// JSON, parsed) so that an HTML error page never stands in for a config or tokenizer.
Status fetch_small_file(io::HttpClient& http, const std::string& url, const format::HubFile& f,
                        const std::string& commit, const std::string& source_dir) {
    const fs::path dst = fs::path(source_dir) / f.path;
    std::error_code ec;
    if (fs::exists(dst, ec) && fs::file_size(dst, ec) == f.size_bytes) return Status::ok();
    SLUICE_ASSIGN_OR_RETURN(io::HttpResponse r, http.get(url, std::max<uint64_t>(f.size_bytes, 1) + 1));
    if (auto c = r.headers.find("x-repo-commit"); c != r.headers.end() && c->second != commit)
        return error(ErrorCode::kIo, "[pull] '" + f.path + "' came from commit " + c->second + ", expected " +
                                         commit + " (the mirror does not serve the pinned revision)");
    const std::string type = r.headers.count("content-type") ? r.headers["content-type"] : "";
    if (type.find("text/html") != std::string::npos && !ends_with(f.path, ".html"))
        return error(ErrorCode::kIo, "[pull] '" + f.path + "': the server answered an HTML page (" + type +
                                         "), not the file");
    if (r.body.size() != f.size_bytes)
        return error(ErrorCode::kIo, "[pull] '" + f.path + "': got " + std::to_string(r.body.size()) +
                                         " bytes, the repository lists " + std::to_string(f.size_bytes));
    if (ends_with(f.path, ".json") && json::parse(r.body, nullptr, false).is_discarded())
        return error(ErrorCode::kIo, "[pull] '" + f.path + "': not valid JSON");
    fs::create_directories(dst.parent_path(), ec);
    return io::write_file_atomic(dst.string(), r.body);
}

// The safetensors header of a remote shard: 8 bytes of length, then the JSON.
Expected<format::SafetensorsHeader> fetch_header(io::HttpClient& http, const std::string& url,
                                                 const format::HubFile& f) {
    std::string bytes;
    auto sink = [&](std::span<const uint8_t> b) {
        bytes.append(reinterpret_cast<const char*>(b.data()), b.size());
        return Status::ok();
    };
    if (f.size_bytes < 8)
        return error(ErrorCode::kInvalidArgument,
                     "[pull] '" + f.path + "' is shorter than a safetensors header");
    SLUICE_RETURN_IF_ERROR(http.get_range(url, 0, 8, f.size_bytes, sink));
    uint64_t len = 0;
    std::memcpy(&len, bytes.data(), 8);
    if (len > format::kMaxSafetensorsHeaderBytes || len > f.size_bytes - 8)
        return error(ErrorCode::kInvalidArgument,
                     "[pull] '" + f.path + "': header length " + std::to_string(len) + " does not fit the " +
                         std::to_string(f.size_bytes) + "-byte file (not a safetensors file?)");
    SLUICE_RETURN_IF_ERROR(http.get_range(url, 8, 8 + len, f.size_bytes, sink));
    return format::parse_safetensors_header({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                                            f.size_bytes, f.path);
}

}  // namespace

Expected<PullResult> pull_model(const PullOptions& options) {
    PullOptions o = options;
    if (o.repo.empty() || o.repo.find("..") != std::string::npos || o.repo.front() == '/' ||
        o.repo.back() == '/')
        return error(ErrorCode::kInvalidArgument,
                     "[pull] repository must look like ORG/NAME, got '" + o.repo + "'");
    if (o.endpoint.empty()) o.endpoint = "https://huggingface.co";
    while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
    if (o.out_dir.empty()) o.out_dir = pull_dir({o.repo, o.revision});
    auto notice = [&](const std::string& s) {
        if (o.notice) o.notice(s);
    };
    io::HttpOptions ho;
    ho.token = o.token;
    ho.stall_timeout_s = o.stall_timeout_s;
    ho.max_attempts = o.max_attempts;
    ho.retry_wait_s = o.retry_wait_s;
    ho.user_agent = std::string("sluice/") + SLUICE_VERSION;
    ho.on_retry = [&](const std::string& s) { notice(s); };
    io::HttpClient http(ho);

    notice("pulling " + o.repo + "@" + o.revision + " from " + o.endpoint + " into " + o.out_dir +
           (o.token.empty() ? "" : " (with a token)"));
    const std::string source_dir = (fs::path(o.out_dir) / kSourceDir).string();
    std::error_code ec;
    // 1. The revision, pinned to a commit (kept across resumes).
    PullResult result;
    result.commit = pinned_commit(source_dir, o);
    if (result.commit.empty()) {
        fs::remove_all(source_dir, ec);  // staged files of another revision, if any
        SLUICE_ASSIGN_OR_RETURN(io::HttpResponse r,
                                http.get(format::hub_revision_url(o.endpoint, o.repo, o.revision)));
        SLUICE_ASSIGN_OR_RETURN(result.commit, format::parse_hub_revision(r.body));
        notice("revision " + o.revision + " is commit " + result.commit);
    } else {
        notice("resuming the pull of commit " + result.commit);
    }
    if (fs::exists(fs::path(o.out_dir) / "manifest.json", ec)) {
        // A finished pull of this commit needs nothing more; any other complete pack is left alone.
        auto text = io::read_text_file((fs::path(o.out_dir) / kRecordName).string());
        auto rec = text.has_value() ? parse_stream_record(*text, kRecordName)
                                    : Expected<StreamRecord>(text.status());
        if (rec.has_value() && rec->source == "hf:" + o.repo + "@" + result.commit) {
            result.pack.already_complete = true;
            return result;
        }
        return error(ErrorCode::kInvalidArgument, "[pull] '" + o.out_dir +
                                                      "' already holds a complete pack of another source or "
                                                      "revision; choose another folder (--to) or delete it");
    }

    // 2. The file listing (paged), at that commit.
    std::vector<format::HubFile> files;
    for (std::string url = format::hub_tree_url(o.endpoint, o.repo, result.commit); !url.empty();) {
        SLUICE_ASSIGN_OR_RETURN(io::HttpResponse r, http.get(url));
        SLUICE_ASSIGN_OR_RETURN(auto page, format::parse_hub_tree(r.body));
        files.insert(files.end(), page.begin(), page.end());
        url = r.headers.count("link") ? format::hub_next_page(r.headers["link"]) : "";
    }

    // 3. Config, index, tokenizer and template files into the staging folder.
    fs::create_directories(source_dir, ec);
    if (ec) return error(ErrorCode::kIo, "[pull] cannot create '" + source_dir + "': " + ec.message());
    SLUICE_RETURN_IF_ERROR(io::write_file_atomic(
        (fs::path(source_dir) / "pin.json").string(),
        json({{"repo", o.repo}, {"revision", o.revision}, {"commit", result.commit}}).dump()));
    std::string index_json;
    for (const auto& f : files) {
        if (f.path != "model.safetensors.index.json") continue;
        SLUICE_RETURN_IF_ERROR(
            fetch_small_file(http, format::hub_resolve_url(o.endpoint, o.repo, result.commit, f.path), f,
                             result.commit, source_dir));
        SLUICE_ASSIGN_OR_RETURN(index_json, io::read_text_file((fs::path(source_dir) / f.path).string()));
    }
    SLUICE_ASSIGN_OR_RETURN(format::HubSelection sel,
                            format::select_hub_files(files, index_json, o.include, o.exclude));
    for (const auto& f : sel.small_files)
        SLUICE_RETURN_IF_ERROR(
            fetch_small_file(http, format::hub_resolve_url(o.endpoint, o.repo, result.commit, f.path), f,
                             result.commit, source_dir));

    // 4. The shards' headers, and the plan `sluice pack` would make from the same files.
    std::vector<std::pair<std::string, format::SafetensorsHeader>> headers;
    for (const auto& f : sel.shards) {
        SLUICE_ASSIGN_OR_RETURN(
            auto h,
            fetch_header(http, format::hub_resolve_url(o.endpoint, o.repo, result.commit, f.path), f));
        headers.emplace_back(f.path, std::move(h));
    }
    SLUICE_ASSIGN_OR_RETURN(auto ckpt, format::Checkpoint::from_headers(source_dir, std::move(headers)));
    SLUICE_ASSIGN_OR_RETURN(model::ModelConfig cfg, model::load_model_config(source_dir));
    SLUICE_ASSIGN_OR_RETURN(const int bits, resolve_pack_bits(cfg, o.bits, o.group_size, o.repo));
    SLUICE_ASSIGN_OR_RETURN(PackPlan plan, plan_pack(cfg, *ckpt, bits, o.group_size));
    StreamOptions so;
    for (size_t s = 0; s < plan.shards.size(); ++s) {
        plan.shards[s].size_bytes = sel.shards[s].size_bytes;  // ≥ the planned end (header check)
        so.shard_sha256.push_back(sel.shards[s].sha256);
    }
    notice("packing " + std::to_string(plan.source_bytes()) + " source bytes into " +
           std::to_string(plan.packed_bytes()) + " packed bytes");

    // 5. Stream the shards through the plan.
    // One connection per shard being streamed (a client per call: curl handles are single-threaded).
    std::atomic<uint64_t> downloaded{0};
    const ShardReader reader = [&](size_t s, uint64_t begin, uint64_t end, const ShardSink& sink) -> Status {
        const format::HubFile& f = sel.shards[s];
        auto counted = [&](std::span<const uint8_t> b) {
            downloaded += b.size();
            return sink(b);
        };
        if (begin > 0) notice("resuming " + f.path + " at byte " + std::to_string(begin));
        io::HttpClient shard_http(ho);
        return shard_http.get_range(format::hub_resolve_url(o.endpoint, o.repo, result.commit, f.path), begin,
                                    end, f.size_bytes, counted);
    };
    so.parallel_shards = o.connections;
    so.out_dir = o.out_dir;
    so.record_name = kRecordName;
    so.source = "hf:" + o.repo + "@" + result.commit;
    so.side_dir = source_dir;
    so.extra_files = sel.extra_files;
    so.progress = [&](const std::string&, uint64_t done, uint64_t total) {
        if (o.progress) o.progress("download", done, total);
    };
    auto packed = run_pack_plan(plan, reader, so);
    result.downloaded_bytes = downloaded;
    if (!packed.has_value()) return packed.status();
    result.pack = *packed;
    fs::remove_all(source_dir, ec);
    return result;
}

}  // namespace sluice::convert
