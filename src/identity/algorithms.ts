// The RFC 9421 §3.3 algorithms node:crypto verifies (ed25519 by libsodium where it loads: ed25519.ts), and
// which key each needs. hmac-sha256 is only ever used with a key the operator configured by hand: a directory
// publishes public keys only.
import { constants, createHmac, type KeyObject, timingSafeEqual, verify } from 'node:crypto'
import { verifyEd25519 } from './ed25519.ts'

export const ALGORITHMS = [
  'ed25519',
  'rsa-pss-sha512',
  'ecdsa-p256-sha256',
  'rsa-v1_5-sha256',
  'hmac-sha256',
] as const
export type Algorithm = (typeof ALGORITHMS)[number]

/** The algorithm a key can verify (a key is bound to one: §3.3.7 forbids letting `alg` pick another). */
export function algorithmOf(key: KeyObject): Algorithm | null {
  if (key.type === 'secret') return 'hmac-sha256'
  switch (key.asymmetricKeyType) {
    case 'ed25519':
      return 'ed25519'
    case 'rsa-pss':
      return 'rsa-pss-sha512'
    case 'ec':
      return key.asymmetricKeyDetails?.namedCurve === 'prime256v1' ? 'ecdsa-p256-sha256' : null
    default:
      return null
  }
}

/** Checks one signature over the base; a bad signature and a wrong-shaped one are both just false. */
export function verifyWith(alg: Algorithm, key: KeyObject, base: string, signature: Uint8Array): boolean {
  const data = Buffer.from(base, 'utf8')
  try {
    switch (alg) {
      case 'ed25519':
        return verifyEd25519(key, data, signature)
      case 'rsa-pss-sha512':
        return verify(
          'sha512',
          data,
          { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 64 },
          signature,
        )
      case 'rsa-v1_5-sha256':
        return verify('sha256', data, key, signature)
      case 'ecdsa-p256-sha256':
        // §3.3.4: r || s, 32 bytes each, not DER.
        return verify('sha256', data, { key, dsaEncoding: 'ieee-p1363' }, signature)
      case 'hmac-sha256': {
        const mac = createHmac('sha256', key).update(data).digest()
        return mac.length === signature.length && timingSafeEqual(mac, signature)
      }
    }
  } catch {
    return false
  }
}

/** Whether an RSA key (imported as plain rsaEncryption) may be used with the algorithm the operator named. */
export function keyFits(alg: Algorithm, key: KeyObject): boolean {
  if (alg === 'hmac-sha256') return key.type === 'secret'
  if (key.type !== 'public') return false
  if (alg === 'rsa-pss-sha512' || alg === 'rsa-v1_5-sha256') {
    return key.asymmetricKeyType === 'rsa' || key.asymmetricKeyType === 'rsa-pss'
  }
  return algorithmOf(key) === alg
}
