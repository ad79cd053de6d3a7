#include "palette.h"

#include <algorithm>
#include <array>

namespace tapestry::views {

QColor classColor(int classId)
{
    // Light tints of Tableau 10: readable dark text on every one.
    static constexpr std::array<QRgb, 10> kColors{0xa6c8e8, 0xffc38a, 0xa8dba0, 0xf4a6a6, 0xcdb8e0,
                                                  0xd4b5ad, 0xf5c4e4, 0xd0d0d0, 0xe6e699, 0x9fe0ea};
    if (classId < 0)
        return neutralColor();
    return QColor(kColors[static_cast<std::size_t>(classId) % kColors.size()]);
}

QColor neutralColor()
{
    return QColor(0xeceff1);
}

QColor heatColor(double fraction)
{
    const double f = std::clamp(fraction, 0.0, 1.0);
    // From pale yellow through orange to red.
    return QColor::fromHsvF(static_cast<float>(0.16 * (1.0 - f)), static_cast<float>(0.25 + 0.6 * f), 1.0f);
}

} // namespace tapestry::views
