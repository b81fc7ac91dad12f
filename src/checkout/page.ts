// The checkout page's files (page/*.html, .css, .js), read once at start; the templates are filled with
// escaped values. CSS and JS are served under content-hashed names, so they can be cached for a year, and
// the CSP allows only them: no inline script or style runs on the page a customer pays from.
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'

const PAGE_DIR = new URL('./page/', import.meta.url)

export interface StaticAsset {
  path: string
  type: string
  body: Buffer
}

export interface CheckoutPages {
  /** Fills page.html (see compile). */
  renderPayment(values: Record<string, string>): string
  renderNotFound(): string
  /** By path under /pay/assets/. */
  assets: Map<string, StaticAsset>
  cssUrl: string
  jsUrl: string
}

/** default-src 'none': the page's own stylesheet and script, fetches to this origin, https logos, inline SVG. */
export const PAGE_CSP =
  "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' https: data:; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
export const MESSAGE_CSP = "default-src 'none'; style-src 'self'; base-uri 'none'; frame-ancestors 'none'"

export function escapeHtml(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  )
}

function asset(name: string, type: string): StaticAsset {
  const body = readFileSync(new URL(name, PAGE_DIR))
  const digest = createHash('sha256').update(body).digest('hex').slice(0, 12)
  const [base, ext] = name.split('.')
  return { path: `${base}.${digest}.${ext}`, type, body }
}

/** `%name%` is replaced by the escaped value, `<!--raw:name-->` by trusted markup (the QR code's SVG). */
function compile(template: string): (values: Record<string, string>) => string {
  // Split once at start: rendering is a join of the literal parts and the values.
  const parts = template.split(/(%[a-z0-9_]+%|<!--raw:[a-z0-9_]+-->)/)
  return (values) => {
    let out = ''
    for (const part of parts) {
      const escaped = /^%([a-z0-9_]+)%$/.exec(part)
      const raw = /^<!--raw:([a-z0-9_]+)-->$/.exec(part)
      if (escaped) out += escapeHtml(values[escaped[1]!] ?? '')
      else if (raw) out += values[raw[1]!] ?? ''
      else out += part
    }
    return out
  }
}

export function loadCheckoutPages(): CheckoutPages {
  const css = asset('page.css', 'text/css; charset=utf-8')
  const js = asset('page.js', 'text/javascript; charset=utf-8')
  const cssUrl = `/pay/assets/${css.path}`
  const jsUrl = `/pay/assets/${js.path}`
  const page = compile(readFileSync(new URL('page.html', PAGE_DIR), 'utf8'))
  const notFound = compile(readFileSync(new URL('not-found.html', PAGE_DIR), 'utf8'))({ css_url: cssUrl })
  return {
    renderPayment: (values) => page({ css_url: cssUrl, js_url: jsUrl, ...values }),
    renderNotFound: () => notFound,
    assets: new Map([
      [css.path, css],
      [js.path, js],
    ]),
    cssUrl,
    jsUrl,
  }
}
