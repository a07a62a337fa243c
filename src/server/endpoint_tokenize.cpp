// POST /tokenize {"content": text, "parse_special"?: bool} → {"tokens": [ids]} and
// POST /detokenize {"tokens": [ids]} → {"content": text} (llama.cpp server's shapes).
#include "server/endpoints.h"
#include "server/transport.h"

namespace sluice::server {

using json = nlohmann::json;

void handle_tokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
    if (!ctx.tokenizer)
        return send_error(res, invalid_request("this model has no tokenizer", "", "no_tokenizer"));
    auto body = parse_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
    const auto& b = std::get<nlohmann::ordered_json>(body);
    auto content = b.find("content");
    if (content == b.end() || !content->is_string())
        return send_error(
            res, invalid_request("'content' is required and must be a string", "content", "invalid_type"));
    bool parse_special = true;
    if (auto p = b.find("parse_special"); p != b.end() && !p->is_null()) {
        if (!p->is_boolean())
            return send_error(
                res, invalid_request("'parse_special' must be a boolean", "parse_special", "invalid_type"));
        parse_special = p->get<bool>();
    }
    send_json(res, {{"tokens", ctx.tokenizer->encode(content->get<std::string>(), parse_special)}});
}

void handle_detokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
    if (!ctx.tokenizer)
        return send_error(res, invalid_request("this model has no tokenizer", "", "no_tokenizer"));
    auto body = parse_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
    const auto& b = std::get<nlohmann::ordered_json>(body);
    auto tokens = b.find("tokens");
    if (tokens == b.end() || !tokens->is_array())
        return send_error(res, invalid_request("'tokens' is required and must be an array of token ids",
                                               "tokens", "invalid_type"));
    std::vector<int32_t> ids;
    const int32_t vocab = ctx.tokenizer->vocab_size();
    for (size_t i = 0; i < tokens->size(); ++i) {
        const auto& t = (*tokens)[i];
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
            return send_error(
                res, invalid_request("'tokens[" + std::to_string(i) + "]' must be a token id in [0, " +
                                         std::to_string(vocab) + "), got " + t.dump().substr(0, 64),
                                     "tokens", "invalid_value"));
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    send_json(res, {{"content", ctx.tokenizer->decode(ids)}});
}

}  // namespace sluice::server
