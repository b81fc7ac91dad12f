// Cheap unique request ids: a random per-process prefix plus a counter (no crypto call per request).
import { randomBytes } from 'node:crypto'

const prefix = `req_${randomBytes(6).toString('hex')}`
let counter = 0

export function nextRequestId(): string {
  counter = (counter + 1) % Number.MAX_SAFE_INTEGER
  return `${prefix}${counter.toString(36).padStart(6, '0')}`
}
