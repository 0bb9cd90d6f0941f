// The HTML report's page, embedded in the command at build time.
#pragma once

#include <string_view>

namespace vramtrace {

/// The report page before its data goes in: render/report/report.html with its @include lines
/// replaced by the files they name (the CSS and the script's pieces), byte for byte. It holds the
/// placeholder "@DATA@" exactly once, where render_report_html puts the report's JSON (escaped by
/// json_for_script). Static storage; thread-safe.
///
/// Defined in a source file that reporter/render/embed_page.cmake generates into the build tree
/// from render/report/ whenever one of its files changes.
std::string_view report_page_template() noexcept;

}  // namespace vramtrace
