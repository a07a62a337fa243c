// Where models live, and how a MODEL argument becomes a folder (issue 23).
//
// A MODEL argument that names an existing path is that path. Otherwise "ORG/NAME[@REV]" names a
// Hugging Face repository (REV: a branch, tag or commit; "main" when not given), looked up in:
//   1. sluice's models folder — $SLUICE_MODELS, else $XDG_DATA_HOME/sluice/models, else
//      ~/.local/share/sluice/models — at ORG/NAME (revision main) or ORG/NAME@REV, which is where
//      `sluice pull` writes by default;
//   2. the Hugging Face cache — $HF_HUB_CACHE, else $HF_HOME/hub, else
//      $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub — at
//      models--ORG--NAME/snapshots/COMMIT, the commit read from refs/REV (a 40-hex REV is the
//      commit itself): what `hf download` and transformers leave behind.
// A miss is kNotFound naming every place looked at; the CLI then pulls (--pull) or says how to.
// Rejected alternative: a registry file of installed models — it goes stale when a folder is
// moved or deleted by hand; the folders themselves are the truth.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::convert {

struct ModelId {
    std::string repo;               // "ORG/NAME"
    std::string revision = "main";  // branch, tag or commit
    std::string str() const { return revision == "main" ? repo : repo + "@" + revision; }
};

// "ORG/NAME" or "ORG/NAME@REV" with the Hub's characters (letters, digits, '-', '_', '.'; no
// leading '.' and no ".."); nullopt for anything else (a path, a typo with two slashes).
std::optional<ModelId> parse_model_id(std::string_view arg);

std::string models_root();   // sluice's models folder (see above); not created
std::string hf_hub_cache();  // the Hugging Face hub cache (see above)
// The Hub token as huggingface_hub finds it: $HF_TOKEN, else the file $HF_TOKEN_PATH, else
// $HF_HOME/token, else ~/.cache/huggingface/token (what `hf auth login` writes); "" when none.
std::string hf_token();

// Where `pull` puts `id` by default: models_root()/ORG/NAME, or ORG/NAME@REV for another revision.
std::string pull_dir(const ModelId& id);

// Where the packed layout of a checkpoint found in the Hugging Face cache is made once and reused:
// models_root()/.hf-packed/ORG--NAME@COMMIT, COMMIT the snapshot folder's name (a new snapshot gets
// its own; the dot keeps it out of `list`, which shows the cache entry itself).
std::string hf_packed_dir(const ModelId& id, const std::string& snapshot_dir);

struct ResolvedModel {
    std::string dir;
    std::string where;  // "path", "models" (sluice's folder) or "hf-cache"
    std::optional<ModelId> id;
};

// See the header comment. Errors: kNotFound (not a path, not installed: the message names the
// places looked at), kInvalidArgument (neither a path nor a model id).
Expected<ResolvedModel> resolve_model(const std::string& arg);

struct InstalledModel {
    std::string id;     // "ORG/NAME[@REV]"
    std::string where;  // "models" or "hf-cache"
    std::string dir;
    std::string commit;     // "" when unknown
    uint64_t bytes = 0;     // on disk (the HF cache: the snapshot's files, links followed)
    bool complete = false;  // a packed model with its manifest, or a snapshot with config.json
};

// Every model in sluice's models folder and the Hugging Face cache, sorted by id.
std::vector<InstalledModel> list_models();

// Deletes `id` from sluice's models folder. A model only in the Hugging Face cache is not touched
// (kInvalidArgument saying so: that cache is huggingface_hub's to manage); kNotFound when absent.
Expected<std::string> remove_model(const ModelId& id);

}  // namespace sluice::convert
