#pragma once

#include <QColor>

namespace tapestry::views {

// Colours of the graph view. Classes take a qualitative palette (each class
// its own hue, the same for all its instances); nodes outside classes are
// neutral so the repeated structure stands out.
QColor classColor(int classId);
QColor neutralColor();
// 0 → cool, 1 → hot, for the cost heat colouring.
QColor heatColor(double fraction);

} // namespace tapestry::views
