// The slice of RFC 8941 structured fields that HTTP message signatures use: dictionaries of items and inner
// lists with parameters (Signature-Input, Signature, Signature-Agent), and their canonical serialization.
export type BareItem = string | number | boolean | Uint8Array | { token: string }
export type Params = Map<string, BareItem>
export interface Item {
  value: BareItem
  params: Params
}
export interface InnerList {
  items: Item[]
  params: Params
}
export type Member = Item | InnerList

export function isInnerList(m: Member): m is InnerList {
  return 'items' in m
}

class Cursor {
  i = 0
  constructor(readonly s: string) {}
  peek(): string {
    return this.s[this.i] ?? ''
  }
  skipSp(): void {
    while (this.s[this.i] === ' ') this.i++
  }
  skipOws(): void {
    while (this.s[this.i] === ' ' || this.s[this.i] === '\t') this.i++
  }
}

// Character classes as code tests, not regular expressions: these run once per character of every signed
// request's headers (a regex test per character cost more than the rest of the parse).
const isLower = (c: number) => c >= 0x61 && c <= 0x7a
const isDigit = (c: number) => c >= 0x30 && c <= 0x39
const isAlpha = (c: number) => isLower(c) || (c >= 0x41 && c <= 0x5a)
/** RFC 8941 key: lcalpha / "*" first, then lcalpha / DIGIT / "_" / "-" / "." / "*". */
const isKeyStart = (c: number) => isLower(c) || c === 0x2a
const isKeyChar = (c: number) =>
  isLower(c) || isDigit(c) || c === 0x5f || c === 0x2d || c === 0x2e || c === 0x2a
const isTokenStart = (c: number) => isAlpha(c) || c === 0x2a
/** RFC 9110 tchar, plus ":" and "/". */
const TOKEN_EXTRA = new Set([..."!#$%&'*+-.^_`|~:/"].map((ch) => ch.charCodeAt(0)))
const isTokenChar = (c: number) => isAlpha(c) || isDigit(c) || TOKEN_EXTRA.has(c)

/** Parses a dictionary field value; null when it is not valid RFC 8941 (the caller treats it as absent). */
export function parseDictionary(input: string): Map<string, Member> | null {
  const c = new Cursor(input.trim())
  const out = new Map<string, Member>()
  if (c.s.length === 0) return out
  while (c.i < c.s.length) {
    const key = parseKey(c)
    if (key === null) return null
    let member: Member | null
    if (c.peek() === '=') {
      c.i++
      member = parseMember(c)
    } else {
      const params = parseParams(c)
      member = params === null ? null : { value: true, params }
    }
    if (member === null) return null
    out.set(key, member)
    c.skipOws()
    if (c.i >= c.s.length) return out
    if (c.peek() !== ',') return null
    c.i++
    c.skipOws()
    if (c.i >= c.s.length) return null
  }
  return out
}

function parseMember(c: Cursor): Member | null {
  if (c.peek() === '(') return parseInnerList(c)
  const value = parseBareItem(c)
  if (value === null) return null
  const params = parseParams(c)
  return params === null ? null : { value, params }
}

function parseInnerList(c: Cursor): InnerList | null {
  c.i++
  const items: Item[] = []
  for (;;) {
    c.skipSp()
    if (c.peek() === ')') {
      c.i++
      const params = parseParams(c)
      return params === null ? null : { items, params }
    }
    const value = parseBareItem(c)
    if (value === null) return null
    const params = parseParams(c)
    if (params === null) return null
    items.push({ value, params })
    const next = c.peek()
    if (next !== ' ' && next !== ')') return null
  }
}

function parseParams(c: Cursor): Params | null {
  const params: Params = new Map()
  while (c.peek() === ';') {
    c.i++
    c.skipSp()
    const key = parseKey(c)
    if (key === null) return null
    let value: BareItem | null = true
    if (c.peek() === '=') {
      c.i++
      value = parseBareItem(c)
      if (value === null) return null
    }
    params.set(key, value)
  }
  return params
}

function parseKey(c: Cursor): string | null {
  if (!isKeyStart(c.s.charCodeAt(c.i))) return null
  const start = c.i
  while (c.i < c.s.length && isKeyChar(c.s.charCodeAt(c.i))) c.i++
  return c.s.slice(start, c.i)
}

function parseBareItem(c: Cursor): BareItem | null {
  const ch = c.peek()
  if (ch === '"') return parseString(c)
  if (ch === ':') return parseBytes(c)
  if (ch === '?') {
    const v = c.s[c.i + 1]
    if (v !== '0' && v !== '1') return null
    c.i += 2
    return v === '1'
  }
  if (ch === '-' || (ch >= '0' && ch <= '9')) return parseInteger(c)
  if (isTokenStart(c.s.charCodeAt(c.i))) {
    const start = c.i
    while (c.i < c.s.length && isTokenChar(c.s.charCodeAt(c.i))) c.i++
    return { token: c.s.slice(start, c.i) }
  }
  return null
}

/** An integer of 1 to 15 digits (RFC 8941 §4.2.4); a decimal is not one the signature fields use. */
function parseInteger(c: Cursor): number | null {
  const start = c.i
  if (c.s[c.i] === '-') c.i++
  const digitsAt = c.i
  while (c.i < c.s.length && isDigit(c.s.charCodeAt(c.i))) c.i++
  const digits = c.i - digitsAt
  if (digits === 0 || digits > 15 || c.s[c.i] === '.') return null
  return Number(c.s.slice(start, c.i))
}

function parseString(c: Cursor): string | null {
  c.i++
  let out = ''
  while (c.i < c.s.length) {
    const ch = c.s[c.i++]!
    if (ch === '\\') {
      const next = c.s[c.i++]
      if (next !== '"' && next !== '\\') return null
      out += next
    } else if (ch === '"') {
      return out
    } else {
      const code = ch.charCodeAt(0)
      if (code < 0x20 || code > 0x7e) return null
      out += ch
    }
  }
  return null
}

function parseBytes(c: Cursor): Uint8Array | null {
  const end = c.s.indexOf(':', c.i + 1)
  if (end < 0) return null
  const b64 = c.s.slice(c.i + 1, end)
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) return null
  c.i = end + 1
  return new Uint8Array(Buffer.from(b64, 'base64'))
}

export function serializeBareItem(v: BareItem): string {
  if (typeof v === 'string') {
    // Almost every string (key ids, nonces, tags) has nothing to escape: no regex pass for those.
    if (!v.includes('"') && !v.includes('\\')) return `"${v}"`
    return `"${v.replace(/[\\"]/g, (m) => `\\${m}`)}"`
  }
  if (typeof v === 'number') return String(v)
  if (typeof v === 'boolean') return v ? '?1' : '?0'
  if (v instanceof Uint8Array) return `:${Buffer.from(v).toString('base64')}:`
  return v.token
}

export function serializeParams(params: Params): string {
  let out = ''
  for (const [k, v] of params) out += v === true ? `;${k}` : `;${k}=${serializeBareItem(v)}`
  return out
}

export function serializeItem(item: Item): string {
  return serializeBareItem(item.value) + serializeParams(item.params)
}

export function serializeInnerList(list: InnerList): string {
  return `(${list.items.map(serializeItem).join(' ')})${serializeParams(list.params)}`
}

export function serializeMember(m: Member): string {
  return isInnerList(m) ? serializeInnerList(m) : serializeItem(m)
}
