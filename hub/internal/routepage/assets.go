package routepage

import "embed"

// assets are the page's files, served by ServeUI.
//
//go:embed assets/index.html assets/page.js assets/page.css
var assets embed.FS
