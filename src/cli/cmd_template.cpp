// `sluice template MODEL_DIR --messages FILE.json [--tools FILE.json] [--kwargs JSON]
// [--no-generation-prompt] [--template-name NAME]`: renders the model's chat template and prints
// the prompt exactly (no newline added), for checking against transformers / @huggingface/jinja.
// MODEL_DIR may be a .gguf file: its tokenizer.chat_template metadata.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/model_arg.h"
#include "sluice/chat_template.h"

namespace {

struct TemplateOptions {
    std::string model_dir;
    std::string messages_path;
    std::string tools_path;
    std::string kwargs_json;
    std::string template_name;
    bool no_generation_prompt = false;
};

nlohmann::ordered_json read_json_file(const std::string& path, const char* what) {
    const std::string text = sluice::cli::read_input(path, std::string(what) + " file");
    auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
        throw sluice::cli::CliError(std::string(what) + " file '" + path + "' is not valid JSON");
    return j;
}

void run_template(const TemplateOptions& opt) {
    using sluice::cli::check;
    using sluice::cli::CliError;
    auto messages = read_json_file(opt.messages_path, "messages");
    // Accept either a bare array or {"messages": [...]} as produced by request logs.
    if (messages.is_object() && messages.contains("messages")) messages = messages["messages"];
    if (!messages.is_array())
        throw CliError("messages file '" + opt.messages_path + "' must hold a JSON array");
    nlohmann::ordered_json tools = nullptr;
    if (!opt.tools_path.empty()) {
        tools = read_json_file(opt.tools_path, "tools");
        if (!tools.is_array() && !tools.is_null()) {
            throw CliError("tools file '" + opt.tools_path + "' must hold a JSON array");
        }
    }
    nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
    if (!opt.kwargs_json.empty()) {
        kwargs = nlohmann::ordered_json::parse(opt.kwargs_json, nullptr, false);
        if (kwargs.is_discarded() || !kwargs.is_object()) throw CliError("--kwargs must be a JSON object");
    }
    auto tmpl = check(sluice::ChatTemplate::load(opt.model_dir, opt.template_name));
    std::string prompt = check(tmpl.render(messages, tools, !opt.no_generation_prompt, kwargs));
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
}

}  // namespace

SLUICE_COMMAND(template, 30, [](CLI::App& app) {
    auto opt = std::make_shared<TemplateOptions>();
    auto* cmd = app.add_subcommand("template", "Render a model's chat template for a conversation");
    sluice::cli::add_model_arg(
        cmd, &opt->model_dir, "Model directory (tokenizer_config.json or chat_template.jinja) or .gguf file");
    cmd->add_option("--messages", opt->messages_path, "JSON file with the messages array")->required();
    cmd->add_option("--tools", opt->tools_path, "JSON file with the tools array");
    cmd->add_option("--kwargs", opt->kwargs_json, "Extra template variables as a JSON object");
    cmd->add_flag("--no-generation-prompt", opt->no_generation_prompt, "Do not add the assistant prompt");
    cmd->add_option("--template-name", opt->template_name, "Named template (e.g. tool_use)");
    cmd->callback([opt] { run_template(*opt); });
});
