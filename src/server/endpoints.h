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
void handle_model(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);  // GET /v1/models/{id}
// llama.cpp's server: GET /props (generation defaults, slots, chat template), GET /slots.
void handle_props(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_slots(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
// OpenAI's Responses API (endpoint_responses.cpp): POST /v1/responses, and GET / DELETE
// /v1/responses/{id}, a 404 saying that no response is stored.
void handle_responses(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_stored_response(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
// Anthropic's Messages API (endpoint_anthropic.cpp).
void handle_anthropic_messages(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
// Ollama's API (endpoint_ollama.cpp).
void handle_ollama_chat(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_ollama_generate(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_ollama_tags(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_ollama_ps(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_ollama_show(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);
void handle_ollama_version(ServerContext& ctx, const HttpRequest& req, HttpResponse& res);

// Whether `model` names the served model: empty, its id, or its id with Ollama's ":latest" tag.
bool model_matches(const ServerContext& ctx, std::string_view model);
// With --strict-model-name, 404 model_not_found unless model_matches(); otherwise every name is
// answered by the served model (as llama-server does: clients hard-code names like "gpt-4o-mini").
std::optional<ApiError> check_model(const ServerContext& ctx, const std::string& model);

}  // namespace sluice::server
