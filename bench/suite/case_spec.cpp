#include "case_spec.h"

#include <fstream>
#include <stdexcept>

namespace zenith::bench {

namespace {

const nlohmann::json& required(const CaseSpec& spec, const char* key) {
  if (!spec.params.contains(key)) {
    throw std::runtime_error("case " + spec.name + ": cases.json gives no '" + key + "'");
  }
  return spec.params.at(key);
}

}  // namespace

std::int64_t CaseSpec::integer(const char* key) const { return required(*this, key).get<std::int64_t>(); }

double CaseSpec::number(const char* key) const { return required(*this, key).get<double>(); }

std::string CaseSpec::text(const char* key) const { return required(*this, key).get<std::string>(); }

bool CaseSpec::flag(const char* key) const { return params.value(key, false); }

c10::ScalarType CaseSpec::dtype() const {
  const std::string name = text("dtype");
  if (name == "float32") return c10::ScalarType::Float;
  if (name == "float16") return c10::ScalarType::Half;
  if (name == "bfloat16") return c10::ScalarType::BFloat16;
  throw std::runtime_error("case " + this->name + ": unknown dtype '" + name + "' (float32, float16, bfloat16)");
}

std::vector<CaseSpec> load_cases(const std::string& path, bool smoke) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the case list " + path);
  const auto document = nlohmann::json::parse(in);
  std::vector<CaseSpec> cases;
  for (const auto& entry : document.at("cases")) {
    CaseSpec spec;
    spec.name = entry.at("name").get<std::string>();
    spec.workload = entry.at("workload").get<std::string>();
    spec.params = entry;
    spec.params.erase("smoke");
    if (smoke && entry.contains("smoke")) spec.params.update(entry.at("smoke"));
    cases.push_back(std::move(spec));
  }
  return cases;
}

}  // namespace zenith::bench
