// fastai's `load_learner(path).predict(img)` from C++: an exported model, one image, the triple.
//
//   build/engine export runs/digits_png_resnet34_finetune
//   build/predict_example runs/digits_png_resnet34_finetune/model.export.safetensors data/digits_png/images/7_00004.png
//   ('7', 2, [0.0033, 0.0004, 0.9787, 0.0171, 0.0005])
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cstdio>

#include "engine/core/errors.h"
#include "engine/trainer/learner.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s EXPORTED_MODEL IMAGE\n", argv[0]);
    return 2;
  }
  try {
    auto learner = engine::load_learner(argv[1]);
    // The image as the model's dataset gave it: gray, or RGB (OpenCV decodes colour as BGR).
    const bool gray = learner->image_mode() == "gray";
    cv::Mat img = cv::imread(argv[2], gray ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
    if (img.empty()) throw engine::UserError(std::string(argv[2]) + ": cannot read the image");
    if (!gray) cv::cvtColor(img, img, cv::COLOR_BGR2RGB);
    engine::Prediction p = learner->predict(img);
    std::printf("('%s', %lld, [", p.label.c_str(), static_cast<long long>(p.index));
    for (size_t c = 0; c < p.probabilities.size(); ++c) std::printf("%s%.4f", c ? ", " : "", p.probabilities[c]);
    std::printf("])\n");
  } catch (const engine::UserError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
