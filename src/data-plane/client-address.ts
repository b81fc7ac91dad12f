// Who the client is, for rate limits: the peer address, or behind trusted proxies (server.trusted_proxies)
// the address the nearest of them saw, read from X-Forwarded-For or Forwarded. Behind an untrusted peer
// those headers are ignored (and not forwarded upstream: proxy.ts): anyone can write them.
import { BlockList, isIP } from 'node:net'
import type { HttpRequest, HttpResponse } from './uws.ts'

/** The rate-limit key of a request; call it synchronously in the uWS handler (req dies with it). */
export type ClientKey = (res: HttpResponse, req: HttpRequest) => string

/** A CIDR ('10.0.0.0/8', '2001:db8::/32') or a single address; throws naming the bad entry. */
function addTrusted(list: BlockList, entry: string): void {
  const [address, bits] = entry.split('/') as [string, string | undefined]
  const family = isIP(address)
  const max = family === 4 ? 32 : 128
  const prefix = bits === undefined ? max : Number(bits)
  if (family === 0 || !Number.isInteger(prefix) || prefix < 0 || prefix > max || bits === '')
    throw new Error(`server.trusted_proxies: ${JSON.stringify(entry)} is not an IP address or CIDR`)
  list.addSubnet(address, prefix, family === 4 ? 'ipv4' : 'ipv6')
}

/** Validates the setting (config load uses it too). */
export function parseTrustedProxies(entries: readonly string[]): BlockList {
  const list = new BlockList()
  for (const entry of entries) addTrusted(list, entry)
  return list
}

/** An IPv4 address, or the /64 an IPv6 client controls as a whole; IPv4-mapped IPv6 as plain IPv4. */
export function addressKey(address: string): string {
  if (address.includes('.')) return address.startsWith('::ffff:') ? address.slice(7) : address
  const groups = expandIpv6(address)
  return groups === null ? address : `${groups.slice(0, 4).join(':')}::/64`
}

function expandIpv6(address: string): string[] | null {
  const halves = address.split('::')
  if (halves.length > 2) return null
  const head = halves[0] === '' ? [] : halves[0]!.split(':')
  const tail = halves.length === 2 && halves[1] !== '' ? halves[1]!.split(':') : []
  const missing = 8 - head.length - tail.length
  if (missing < 0 || (halves.length === 1 && missing !== 0)) return null
  return [...head, ...Array<string>(missing).fill('0'), ...tail].map((g) => g.toLowerCase() || '0')
}

function isTrusted(list: BlockList, address: string): boolean {
  const family = isIP(address)
  if (family === 0) return false
  // BlockList matches an IPv4 address against its IPv6 mapped form too; ask in the address's own family.
  return list.check(address, family === 4 ? 'ipv4' : 'ipv6')
}

/** The address in one X-Forwarded-For entry or one Forwarded `for=` value ('[v6]:port', 'v4:port', quoted). */
function hopAddress(raw: string): string {
  let value = raw.trim()
  if (value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1)
  if (value.startsWith('[')) {
    const end = value.indexOf(']')
    return end > 0 ? value.slice(1, end) : value
  }
  // 'a.b.c.d:port' (an IPv6 address without brackets has more than one colon and stays whole).
  const colon = value.indexOf(':')
  if (colon > 0 && value.indexOf(':', colon + 1) < 0) return value.slice(0, colon)
  return value
}

/** The hops a proxy chain recorded, nearest last: X-Forwarded-For, else the `for=` of Forwarded. */
function forwardedHops(req: HttpRequest): string[] {
  const xff = req.getHeader('x-forwarded-for')
  if (xff !== '') return xff.split(',').map(hopAddress)
  const forwarded = req.getHeader('forwarded')
  if (forwarded === '') return []
  const hops: string[] = []
  for (const element of forwarded.split(',')) {
    for (const pair of element.split(';')) {
      const eq = pair.indexOf('=')
      if (eq > 0 && pair.slice(0, eq).trim().toLowerCase() === 'for')
        hops.push(hopAddress(pair.slice(eq + 1)))
    }
  }
  return hops
}

/**
 * The client's address as the nearest trusted proxy saw it: walking the hops from the nearest, the first
 * one that is not a trusted proxy. Entries further left were written by the client and are never used.
 * A hop that is not an address stops the walk at the proxy that wrote it.
 */
export function clientAddress(peer: string, hops: readonly string[], trusted: BlockList | null): string {
  if (trusted === null || !isTrusted(trusted, peer)) return peer
  let client = peer
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = hops[i]!
    if (isIP(hop) === 0) return client
    client = hop
    if (!isTrusted(trusted, hop)) return client
  }
  return client
}

/**
 * The peer's address as uWS prints it. uWS asks the kernel for it (getpeername) each time it is read, and a
 * system call is dear on the paid path: the rate limit's key, the metered call's key and the address
 * forwarded upstream all read it here, once a request (the last response asked is remembered; uWS makes a
 * response object per request and never reuses one, and one response's peer never changes).
 */
export function peerAddress(res: HttpResponse): string {
  if (res !== askedOf) {
    askedAddress = Buffer.from(res.getRemoteAddressAsText()).toString()
    askedOf = res
  }
  return askedAddress
}
let askedOf: HttpResponse | null = null
let askedAddress = ''

export function createClientKey(trustedProxies: readonly string[]): ClientKey {
  const trusted = trustedProxies.length === 0 ? null : parseTrustedProxies(trustedProxies)
  return (res, req) => {
    const peer = unmapped(peerAddress(res))
    if (trusted === null) return addressKey(peer)
    return addressKey(clientAddress(peer, forwardedHops(req), trusted))
  }
}

/** Whether a request's peer is one of server.trusted_proxies (its forwarding headers are then kept). */
export type PeerTrust = (res: HttpResponse) => boolean

const NEVER_TRUSTED: PeerTrust = () => false

export function createPeerTrust(trustedProxies: readonly string[]): PeerTrust {
  if (trustedProxies.length === 0) return NEVER_TRUSTED
  const trusted = parseTrustedProxies(trustedProxies)
  return (res) => isTrusted(trusted, unmapped(peerAddress(res)))
}

function unmapped(address: string): string {
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address
}
