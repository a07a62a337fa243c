// convert/model_store.h: which MODEL arguments are Hub ids, where the folders are looked for
// (environment variables in huggingface_hub's order), and the token file. Lookups through real
// folders are covered end to end by tests/oracle/models.test.mjs.
#include "convert/model_store.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "test_util.h"

namespace sluice::convert {
namespace {

TEST(ModelStore, ParsesHubIds) {
    auto a = parse_model_id("Qwen/Qwen3-Next-80B-A3B-Instruct");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->repo, "Qwen/Qwen3-Next-80B-A3B-Instruct");
    EXPECT_EQ(a->revision, "main");
    EXPECT_EQ(a->str(), "Qwen/Qwen3-Next-80B-A3B-Instruct");
    auto b = parse_model_id("mlx-community/Qwen3-30B-A3B-4bit@refs/pr/3");
    ASSERT_TRUE(b);
    EXPECT_EQ(b->revision, "refs/pr/3");
    EXPECT_EQ(b->str(), "mlx-community/Qwen3-30B-A3B-4bit@refs/pr/3");
    for (const char* bad : {"", "Qwen", "/abs/path", "a/b/c", "./x", "../x", "a/..", "a/.b", "a/b@",
                            "a/b@../x", "a b/c", "a/b c", "org/na$me", "org/", "/name"})
        EXPECT_FALSE(parse_model_id(bad)) << bad;
}

struct EnvGuard {  // sets variables for one test, restores them after
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;
    void set(const char* name, const char* value) {
        const char* old = std::getenv(name);
        saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
        if (value)
            setenv(name, value, 1);
        else
            unsetenv(name);
    }
    ~EnvGuard() {
        for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
            if (it->second)
                setenv(it->first.c_str(), it->second->c_str(), 1);
            else
                unsetenv(it->first.c_str());
        }
    }
};

TEST(ModelStore, FoldersFollowTheEnvironment) {
    EnvGuard env;
    env.set("HOME", "/home/u");
    env.set("SLUICE_MODELS", nullptr);
    env.set("XDG_DATA_HOME", nullptr);
    env.set("HF_HUB_CACHE", nullptr);
    env.set("HF_HOME", nullptr);
    env.set("XDG_CACHE_HOME", nullptr);
    EXPECT_EQ(models_root(), "/home/u/.local/share/sluice/models");
    EXPECT_EQ(hf_hub_cache(), "/home/u/.cache/huggingface/hub");
    env.set("XDG_DATA_HOME", "/data");
    env.set("XDG_CACHE_HOME", "/cache");
    EXPECT_EQ(models_root(), "/data/sluice/models");
    EXPECT_EQ(hf_hub_cache(), "/cache/huggingface/hub");
    env.set("HF_HOME", "/hf");
    EXPECT_EQ(hf_hub_cache(), "/hf/hub");
    env.set("HF_HUB_CACHE", "/hubcache");
    env.set("SLUICE_MODELS", "/m");
    EXPECT_EQ(hf_hub_cache(), "/hubcache");
    EXPECT_EQ(models_root(), "/m");
    EXPECT_EQ(pull_dir({"Qwen/Qwen3-30B-A3B", "main"}), "/m/Qwen/Qwen3-30B-A3B");
    EXPECT_EQ(pull_dir({"Qwen/Qwen3-30B-A3B", "v2"}), "/m/Qwen/Qwen3-30B-A3B@v2");
}

TEST(ModelStore, TokenFromTheEnvironmentOrTheLoginFile) {
    testing::TempDir dir;
    EnvGuard env;
    env.set("HF_TOKEN", nullptr);
    env.set("HF_TOKEN_PATH", nullptr);
    env.set("HF_HOME", dir.path().c_str());
    EXPECT_EQ(hf_token(), "");
    std::ofstream(dir.file("token")) << "hf_saved\n";
    EXPECT_EQ(hf_token(), "hf_saved");
    std::ofstream(dir.file("other")) << "hf_other";
    env.set("HF_TOKEN_PATH", dir.file("other").c_str());
    EXPECT_EQ(hf_token(), "hf_other");
    env.set("HF_TOKEN", "hf_env");
    EXPECT_EQ(hf_token(), "hf_env");
}

TEST(ModelStore, AnExistingPathIsThatPath) {
    testing::TempDir dir;
    auto r = resolve_model(dir.path());
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->where, "path");
    EXPECT_EQ(r->dir, dir.path());
    auto missing = resolve_model(dir.file("nothing-here"));
    ASSERT_FALSE(missing.has_value());
    EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace sluice::convert
