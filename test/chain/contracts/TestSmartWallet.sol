// SPDX-License-Identifier: MIT
// A minimal ERC-1271 contract wallet for tests only: a signature is valid when ECDSA recovers the wallet's
// owner from the digest. It holds USDC like any account; the token asks it through isValidSignature.
pragma solidity ^0.8.24;

contract TestSmartWallet {
  bytes4 private constant MAGIC_VALUE = 0x1626ba7e;
  address public immutable owner;

  constructor(address owner_) {
    owner = owner_;
  }

  function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
    if (signature.length != 65) return 0xffffffff;
    bytes32 r = bytes32(signature[0:32]);
    bytes32 s = bytes32(signature[32:64]);
    uint8 v = uint8(signature[64]);
    address recovered = ecrecover(hash, v, r, s);
    return recovered != address(0) && recovered == owner ? MAGIC_VALUE : bytes4(0xffffffff);
  }
}
