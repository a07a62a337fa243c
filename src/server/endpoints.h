// The server's endpoint handlers, one file each (endpoint_<name>.cpp), wired up in routes.cpp.
// Each handler validates its request fully before doing model work and answers errors with an
// OpenAI error object; none throws.
#pragma once

#include <httplib.h>

#include <optional>

#include "server/api.h"
#include "server/server.h"

namespace sluice::server {

void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_models(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_health(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_metrics(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_web(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);

// 404 model_not_found unless `model` is empty or the served model's id.
std::optional<ApiError> check_model(const ServerContext& ctx, const std::string& model);

}  // namespace sluice::server
