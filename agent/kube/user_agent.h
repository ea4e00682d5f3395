// A client's User-Agent split into what an operator acts on: which program, which version.
// client-go's default is "<binary>/<version> (<os>/<arch>) kubernetes/<commit>", and
// controllers append "/<controller name>" (rest.AddUserAgent); the Python client sends
// "OpenAPI-Generator/<version>/python". Pure; unknown formats keep what they can.
#pragma once

#include <string>
#include <string_view>

namespace stormwatch {

struct UserAgentInfo {
  std::string component;  // "kubectl", "kube-controller-manager", "OpenAPI-Generator", ...
  std::string version;    // "v1.32.4", "1.0.0"
  std::string platform;   // "linux/amd64", "python"
  std::string detail;     // after the commit: e.g. the controller, "deployment-controller"
};

UserAgentInfo ParseUserAgent(std::string_view user_agent);

}  // namespace stormwatch
