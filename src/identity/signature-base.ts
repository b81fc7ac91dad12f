// Builds the RFC 9421 §2.5 signature base: one line per covered component, then "@signature-params". The
// derived components are those a request verifier needs (plus @status, so the RFC's response vectors check).
import {
  type InnerList,
  type Item,
  isInnerList,
  parseDictionary,
  serializeInnerList,
  serializeItem,
  serializeMember,
} from './structured-fields.ts'

/** What a signature can cover of one message, read once from the wire (names lowercased). */
export interface MessageView {
  method: string
  /** "http" or "https", as the client addressed us (behind a TLS terminator: the forwarded scheme). */
  scheme: string
  /** Host and non-default port, lowercased. */
  authority: string
  /** Path, never empty ("/"). */
  path: string
  /** Query without its "?", "" when there is none. */
  query: string
  status?: number
  /** The field's values, combined with ", " (RFC 9110 §5.3); undefined when absent. */
  header(name: string): string | undefined
}

export type BaseResult =
  | { ok: true; base: string }
  | { ok: false; reason: 'missing_component' | 'unsupported_component' }

export function buildSignatureBase(msg: MessageView, input: InnerList): BaseResult {
  const lines: string[] = []
  const seen = new Set<string>()
  for (const component of input.items) {
    if (typeof component.value !== 'string') return { ok: false, reason: 'unsupported_component' }
    const id = serializeItem(component)
    // RFC 9421 §2.5: a component listed twice makes the signature invalid.
    if (seen.has(id)) return { ok: false, reason: 'unsupported_component' }
    seen.add(id)
    const value = componentValue(msg, component)
    if (typeof value !== 'string') return { ok: false, reason: value.reason }
    lines.push(`${id}: ${value}`)
  }
  lines.push(`"@signature-params": ${serializeInnerList(input)}`)
  return { ok: true, base: lines.join('\n') }
}

type ValueResult = string | { reason: 'missing_component' | 'unsupported_component' }

function componentValue(msg: MessageView, c: Item): ValueResult {
  const name = c.value as string
  if (name.startsWith('@')) return derivedValue(msg, name, c)
  for (const p of c.params.keys()) if (p !== 'key' && p !== 'sf') return { reason: 'unsupported_component' }
  const raw = msg.header(name)
  if (raw === undefined) return { reason: 'missing_component' }
  const key = c.params.get('key')
  if (key !== undefined) {
    // §2.1.2: one member of a dictionary field, re-serialized, so only what that member says is signed.
    if (typeof key !== 'string') return { reason: 'unsupported_component' }
    const member = parseDictionary(raw)?.get(key)
    if (member === undefined) return { reason: 'missing_component' }
    return serializeMember(member)
  }
  if (c.params.get('sf') === true) {
    const dict = parseDictionary(raw)
    if (dict === null) return { reason: 'unsupported_component' }
    return [...dict]
      .map(([k, m]) => (!isInnerList(m) && m.value === true ? k : `${k}=${serializeMember(m)}`))
      .join(', ')
  }
  return raw
}

function derivedValue(msg: MessageView, name: string, c: Item): ValueResult {
  if (name !== '@query-param' && c.params.size > 0) return { reason: 'unsupported_component' }
  switch (name) {
    case '@method':
      return msg.method
    case '@authority':
      return msg.authority
    case '@scheme':
      return msg.scheme
    case '@path':
      return msg.path
    case '@query':
      return `?${msg.query}`
    case '@target-uri':
      return `${msg.scheme}://${msg.authority}${msg.path}${msg.query === '' ? '' : `?${msg.query}`}`
    case '@request-target':
      return `${msg.path}${msg.query === '' ? '' : `?${msg.query}`}`
    case '@status':
      return msg.status === undefined ? { reason: 'missing_component' } : String(msg.status)
    case '@query-param':
      return queryParam(msg.query, c)
    default:
      return { reason: 'unsupported_component' }
  }
}

function queryParam(query: string, c: Item): ValueResult {
  const wanted = c.params.get('name')
  if (typeof wanted !== 'string' || c.params.size !== 1) return { reason: 'unsupported_component' }
  // §2.2.8: a name that occurs more than once cannot be signed unambiguously.
  const values = new URLSearchParams(query).getAll(decodeURIComponent(wanted))
  if (values.length !== 1) return { reason: 'missing_component' }
  return encodeURIComponent(values[0]!)
}
