#pragma once
// Small text helpers of the HTML report: escaping, base64 for embedded images, numbers as a person
// reads them in a table or a tooltip.
#include <string>
#include <string_view>

namespace engine::report {

/// Text safe inside HTML elements and double-quoted attributes (& < > " ').
std::string html_escape(std::string_view text);

/// RFC 4648 base64 with padding: the payload of a data: URL.
std::string base64(std::string_view bytes);

/// A value for tables and tooltips: "0.9460", "1.23e-05", "12", "NaN", "inf".
std::string format_value(double value);

/// Seconds as "48 s", "3 min 12 s", "2 h 05 min".
std::string format_duration(double seconds);

}  // namespace engine::report
