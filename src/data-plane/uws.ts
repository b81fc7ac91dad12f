// Loads uWebSockets.js and refuses its silent pure-JS fallback: tollgate must not run slow by accident.

import uws from 'uWebSockets.js'
import { STATUS_CODES } from 'node:http'

export class UwsFallbackError extends Error {
  readonly code = 'TOLLGATE_UWS_NOT_NATIVE'
}

/**
 * Turns off the `uWebSockets: 20` banner header uWS writes on every response. The library has no option
 * for it; its `_cfg` sets the loop's noMark flag for a key whose character codes add up to 655
 * (uNetworking/uWebSockets.js#1048). Process-wide, so once before the first App is enough.
 */
export function hideServerBanner(): void {
  ;(uws as unknown as { _cfg(key: string): void })._cfg('zzzzz-')
}

export function assertNativeUws(): void {
  const native =
    typeof uws.App === 'function' && /\[native code\]/.test(Function.prototype.toString.call(uws.App))
  if (!native || process.env.UWS_USE_FALLBACK) {
    throw new UwsFallbackError(
      `uWebSockets.js did not load its native binary for Node ${process.version} (ABI ${process.versions.modules}, ` +
        `${process.platform}-${process.arch}) and fell back to a slow JavaScript server. ` +
        'Use Node.js 20 or 22 on linux-x64/arm64 or macOS (glibc ≥ 2.36), unset UWS_USE_FALLBACK, and reinstall with `npm ci`.',
    )
  }
}

const statusLines = new Map<number, string>()
/** '201 Created': uWS writes the status line verbatim, so give it the reason phrase too (cached). */
export function statusLine(status: number): string {
  let line = statusLines.get(status)
  if (line === undefined) {
    line = `${status} ${STATUS_CODES[status] ?? 'Unknown'}`
    statusLines.set(status, line)
  }
  return line
}

export type { HttpRequest, HttpResponse, TemplatedApp } from 'uWebSockets.js'
export { uws }
