// Request ids (a leaf: every plane and the admin port use it): the caller's x-request-id when it is sane, else a random per-process prefix plus a counter
// (no crypto call per request). Ids are token characters only, so they go into JSON and headers unescaped.
import { randomBytes } from 'node:crypto'

const prefix = `req_${randomBytes(6).toString('hex')}`
let counter = 0

export function nextRequestId(): string {
  counter = (counter + 1) % Number.MAX_SAFE_INTEGER
  return `${prefix}${counter.toString(36).padStart(6, '0')}`
}

/** Longest incoming id taken as is. */
export const MAX_REQUEST_ID_LENGTH = 128

/** RFC 9110 token characters: no quote, backslash, space or control character can reach a body or a log. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

/** The caller's id if it is 1–128 token characters, else a new one. '' (no header) costs no regex. */
export function requestIdFrom(incoming: string | undefined): string {
  if (incoming === undefined || incoming.length === 0 || incoming.length > MAX_REQUEST_ID_LENGTH)
    return nextRequestId()
  return TOKEN.test(incoming) ? incoming : nextRequestId()
}
