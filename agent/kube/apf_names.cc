#include "agent/kube/apf_names.h"

#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

namespace stormwatch {

using Json = nlohmann::json;

Result<ApfUidNames> ParseApfList(std::string_view json_body, std::string_view list_kind) {
  Json list = Json::parse(json_body, nullptr, /*allow_exceptions=*/false);
  if (!list.is_object()) return Error{"not a JSON object"};
  auto kind = list.find("kind");
  if (kind == list.end() || !kind->is_string() || kind->get_ref<const std::string&>() != list_kind) {
    return Error{"not a " + std::string(list_kind)};
  }
  // An empty list is served with "items": [] (never null), but accept a missing field too.
  ApfUidNames names;
  auto items = list.find("items");
  if (items == list.end() || items->is_null()) return names;
  if (!items->is_array()) return Error{std::string(list_kind) + ".items is not an array"};
  // Items of built-in lists carry no kind/apiVersion: only metadata is relied on.
  for (const Json& item : *items) {
    auto meta = item.is_object() ? item.find("metadata") : item.end();
    if (meta == item.end() || !meta->is_object()) continue;
    auto name = meta->find("name");
    auto uid = meta->find("uid");
    if (name == meta->end() || uid == meta->end() || !name->is_string() || !uid->is_string()) continue;
    if (name->get_ref<const std::string&>().empty() || uid->get_ref<const std::string&>().empty()) continue;
    names[uid->get<std::string>()] = name->get<std::string>();
  }
  return names;
}

void ApfNames::SetStatic(std::map<std::string, std::string> uid_to_name) {
  ApfUidNames names(std::make_move_iterator(uid_to_name.begin()), std::make_move_iterator(uid_to_name.end()));
  std::unique_lock lock(mu_);
  static_names_.swap(names);
}

void ApfNames::Update(ApfUidNames priority_levels, ApfUidNames flow_schemas) {
  std::unique_lock lock(mu_);
  priority_levels_.swap(priority_levels);
  flow_schemas_.swap(flow_schemas);
  // The old maps are freed after the lock is released, when the arguments go out of scope.
}

std::optional<std::string> ApfNames::PriorityLevel(std::string_view uid) const {
  return Lookup(priority_levels_, uid);
}

std::optional<std::string> ApfNames::FlowSchema(std::string_view uid) const {
  return Lookup(flow_schemas_, uid);
}

std::optional<std::string> ApfNames::Lookup(const ApfUidNames& fetched, std::string_view uid) const {
  std::shared_lock lock(mu_);
  if (auto it = fetched.find(uid); it != fetched.end()) return it->second;
  if (auto it = static_names_.find(uid); it != static_names_.end()) return it->second;
  return std::nullopt;
}

}  // namespace stormwatch
