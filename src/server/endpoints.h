// The server's endpoint handlers, one file each (endpoint_<name>.cpp), wired up in routes.cpp.
// Each handler validates its request fully before doing model work and answers errors with an
// OpenAI error object; none throws.
#pragma once

#include <optional>

#include "server/api.h"
#include "server/http.h"
#include "server/server.h"

namespace sluice::server {

void handle_chat_completions(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_completions(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_models(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_health(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_metrics(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_tokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_detokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_web(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);

// 404 model_not_found unless `model` is empty or the served model's id.
std::optional<ApiError> check_model(const ServerContext& ctx, const std::string& model);

}  // namespace sluice::server
