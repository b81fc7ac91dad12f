// libsecp256k1 through the `secp256k1` package, loaded once for the two uses on the money paths: recovering
// the signer of an authorization (./recover-authorization.ts) and signing the treasury's transactions
// (./signing-account.ts). Both fall back to viem (@noble/curves, JS) when the native binary is missing.
import { createRequire } from 'node:module'

/** The calls used from the `secp256k1` package (it ships no types). */
export interface NativeSecp256k1 {
  ecdsaRecover(signature: Uint8Array, recovery: number, digest: Uint8Array, compressed: boolean): Uint8Array
  ecdsaSign(digest: Uint8Array, privateKey: Uint8Array): { signature: Uint8Array; recid: number }
}

/**
 * The module, or null when it is not installed (an optional dependency: a platform without a prebuilt binary
 * and no compiler still runs, on the JS path). The package itself falls back to its own JS (elliptic) when
 * its binary cannot load; `backend` says which one answers.
 */
function load(): { lib: NativeSecp256k1; backend: 'native' | 'elliptic' } | null {
  try {
    const require = createRequire(import.meta.url)
    const lib = require('secp256k1') as NativeSecp256k1
    let backend: 'native' | 'elliptic' = 'elliptic'
    try {
      require('secp256k1/bindings')
      backend = 'native'
    } catch {}
    return { lib, backend }
  } catch {
    return null
  }
}

export const secp256k1 = load()
