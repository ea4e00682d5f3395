#include "agent/kube/user_agent.h"

namespace stormwatch {
namespace {

std::string_view TakeUntil(std::string_view& s, std::string_view stops) {
  size_t end = s.find_first_of(stops);
  std::string_view head = s.substr(0, end);
  s.remove_prefix(end == std::string_view::npos ? s.size() : end);
  return head;
}

}  // namespace

UserAgentInfo ParseUserAgent(std::string_view ua) {
  UserAgentInfo out;
  std::string_view rest = ua;
  out.component = TakeUntil(rest, "/ ");
  if (rest.starts_with("/")) {
    rest.remove_prefix(1);
    out.version = TakeUntil(rest, "/ ");
  }
  if (rest.starts_with("/")) {  // "OpenAPI-Generator/1.0.0/python"
    rest.remove_prefix(1);
    out.platform = TakeUntil(rest, " ");
    return out;
  }
  while (rest.starts_with(" ")) rest.remove_prefix(1);
  if (rest.starts_with("(")) {
    rest.remove_prefix(1);
    out.platform = TakeUntil(rest, ")");
    if (rest.starts_with(")")) rest.remove_prefix(1);
  }
  while (rest.starts_with(" ")) rest.remove_prefix(1);
  if (rest.starts_with("kubernetes/")) {
    rest.remove_prefix(sizeof("kubernetes/") - 1);
    TakeUntil(rest, "/ ");  // the commit
    if (rest.starts_with("/")) out.detail = rest.substr(1);
  }
  return out;
}

}  // namespace stormwatch
