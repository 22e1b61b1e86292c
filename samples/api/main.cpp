// amk as a library: opens a program on GPU 0, sets its input `a` (a ramp), launches, reads its
// output `out` and prints the first values and the kernel's attributes. Without a usable GPU it
// prints the refusal and exits with the error's code (5: device), as the amk command would.
#include <amk/amk.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "samples/elementwise_chain.json";
  try {
    amk::Executable exe = amk::Executable::open(path);
    std::vector<float> a(2048);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) / 512.0f - 2.0f;
    exe.set_input("a", a.data(), a.size() * sizeof(float), "f32");
    exe.launch();
    std::vector<float> out(2048);
    exe.read_output("out", out.data(), out.size() * sizeof(float), "f32");
    std::printf("out = [%g, %g, %g, %g, ...]\n", out[0], out[1], out[2], out[3]);
    const amk::KernelAttributes k = exe.attributes();
    std::printf("%s for %s on %s: grid %u, block %u, %u registers per thread\n", k.kernel.c_str(),
                k.arch.c_str(), k.device.c_str(), k.grid, k.block, k.registers_per_thread);
    return 0;
  } catch (const amk::Error& e) {
    std::fprintf(stderr, "amk_api_sample: %s\n", e.what());
    return static_cast<int>(e.exit_code());
  }
}
