// Refuses upstream and webhook targets in private, loopback, link-local and other non-public ranges (SSRF).
import { lookup as dnsLookup, type LookupAddress } from 'node:dns'
import { BlockList, isIP } from 'node:net'
import { buildConnector } from 'undici'

const blocked = new BlockList()
// IPv4 ranges that are never a public API: RFC 1918, loopback, link-local (cloud metadata lives at
// 169.254.169.254), CGNAT, "this network", benchmarking, documentation, multicast and reserved.
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  blocked.addSubnet(net, prefix, 'ipv4')
}
for (const [net, prefix] of [
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
  ['64:ff9b::', 96],
  ['2001:db8::', 32],
] as const) {
  blocked.addSubnet(net, prefix, 'ipv6')
}

// ::/96 (IPv4-compatible, deprecated) and ::ffff:0:0/96 (IPv4-mapped) carry an IPv4 address in their low
// 32 bits, which a dual-stack socket may connect to: refused whole, in every notation (::ffff:7f00:1,
// ::ffff:127.0.0.1, ::127.0.0.1, ::), since no public API needs to be named that way. A list of their own,
// asked only about IPv6 text: node's BlockList matches plain IPv4 addresses against mapped subnets too.
const embeddedIpv4 = new BlockList()
embeddedIpv4.addSubnet('::', 96, 'ipv6')
embeddedIpv4.addSubnet('::ffff:0:0', 96, 'ipv6')

export function isPrivateAddress(ip: string): boolean {
  const family = isIP(ip)
  if (family === 4) return blocked.check(ip, 'ipv4')
  if (family === 6) return embeddedIpv4.check(ip, 'ipv6') || blocked.check(ip, 'ipv6')
  return true
}

export type TargetCheck =
  | { ok: true; url: URL }
  | {
      ok: false
      reason: 'invalid_url' | 'unsupported_scheme' | 'private_target' | 'unresolvable_host'
      message: string
    }

export interface TargetPolicy {
  allowPrivate: boolean
  /** Allowed URL schemes; webhooks may require https. */
  schemes?: readonly string[]
}

/** Validates a URL's shape and that every address its host resolves to is public (unless allowed). */
export async function checkTargetUrl(raw: string, policy: TargetPolicy): Promise<TargetCheck> {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return { ok: false, reason: 'invalid_url', message: 'must be an absolute http(s) URL' }
  }
  const schemes = policy.schemes ?? ['http:', 'https:']
  if (!schemes.includes(url.protocol)) {
    return { ok: false, reason: 'unsupported_scheme', message: `scheme must be ${schemes.join(' or ')}` }
  }
  if (url.username || url.password) {
    return {
      ok: false,
      reason: 'invalid_url',
      message: 'credentials in the URL are not allowed; use upstream_headers',
    }
  }
  if (policy.allowPrivate) return { ok: true, url }
  const host = url.hostname.replace(/^\[|\]$/g, '')
  const addresses = isIP(host) ? [host] : await resolveAll(host)
  if (addresses === null) return { ok: false, reason: 'unresolvable_host', message: `cannot resolve ${host}` }
  if (addresses.some(isPrivateAddress)) {
    return {
      ok: false,
      reason: 'private_target',
      message: 'targets in private, loopback or link-local ranges are refused',
    }
  }
  return { ok: true, url }
}

function resolveAll(host: string): Promise<string[] | null> {
  return new Promise((resolve) => {
    dnsLookup(host, { all: true }, (err, addresses: LookupAddress[]) => {
      resolve(err || addresses.length === 0 ? null : addresses.map((a) => a.address))
    })
  })
}

type LookupCallback = (
  err: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void

/**
 * A dns.lookup replacement for outgoing sockets: DNS may change after a target was accepted, so the
 * address actually connected to is checked at connect time too.
 */
export function guardedLookup(hostname: string, options: object, callback: LookupCallback): void {
  dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
    if (err) return callback(err, [])
    const bad = addresses.find((a) => isPrivateAddress(a.address))
    if (bad) {
      const e = new Error(`refused to connect to private address ${bad.address}`) as NodeJS.ErrnoException
      e.code = 'ERR_TOLLGATE_PRIVATE_TARGET'
      return callback(e, [])
    }
    if ((options as { all?: boolean }).all) return callback(null, addresses)
    const first = addresses[0]!
    callback(null, first.address, first.family)
  })
}

/**
 * An undici connector for outgoing sockets (upstreams, webhooks). guardedLookup checks every address a host
 * name resolves to at connect time (DNS may have changed since the target was accepted), but net.connect
 * never calls lookup for an IP literal: those are checked here. Once per socket, not per request.
 */
export function guardedConnector(timeoutMs: number): buildConnector.connector {
  const connect = buildConnector({ timeout: timeoutMs, lookup: guardedLookup })
  return (options, callback) => {
    const host = options.hostname.charCodeAt(0) === 91 ? options.hostname.slice(1, -1) : options.hostname
    if (isIP(host) !== 0 && isPrivateAddress(host)) {
      const err = new Error(`refused to connect to private address ${host}`) as NodeJS.ErrnoException
      // Same code as guardedLookup's refusal, so both reach the caller as one outcome.
      err.code = 'ERR_TOLLGATE_PRIVATE_TARGET'
      callback(err, null)
      return
    }
    connect(options, callback)
  }
}
