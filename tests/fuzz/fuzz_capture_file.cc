// Capture files (agent/record/capture_file) and `stormwatch replay` (agent/replay): replay
// reads files it did not necessarily write. The input is written to a memory file, read to the
// end and replayed through a pipeline as `stormwatch replay` does.
#include <sys/mman.h>
#include <unistd.h>

#include "agent/metered_pipeline.h"
#include "agent/pipeline/request_pipeline.h"
#include "agent/record/capture_file.h"
#include "agent/replay.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int fd = memfd_create("fuzz_capture_file", 0);
  static PrometheusExporter* exporter = new PrometheusExporter();  // metric families: once
  if (fd < 0) abort();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) abort();
  auto reader = CaptureReader::Open("/proc/self/fd/" + std::to_string(fd));
  if (!reader) return 0;
  MeteredPipeline pipeline(exporter, DetectorsConfig{}, [](const StormTransition&) {});
  (void)ReplayCapture(**reader, pipeline, /*recorded_pace=*/false, /*drain_s=*/30);
  return 0;
}
