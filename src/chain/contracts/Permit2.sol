// SPDX-License-Identifier: MIT
// The signature-transfer half of Uniswap's Permit2, written for the dev chain: the same functions, errors,
// EIP-712 domain (name "Permit2", no version), type strings and unordered-nonce bitmap as the canonical
// contract at 0x000000000022D473030F116dDEE9F6B43aC78BA3, so a signature the published x402 clients make
// for the real one is accepted here and a tampered one is refused for the same reason. Installed there with
// anvil_setCode: nothing may live in immutables (the runtime code alone is copied), so the domain separator
// is computed from address(this) and block.chainid on each call. The allowance-transfer half (approve,
// permit, transferFrom by allowance) and the batch transfers are not here: the x402 proxies never call them.
pragma solidity ^0.8.24;

interface IERC20Like {
  function transferFrom(address from, address to, uint256 value) external returns (bool);
}

interface IERC1271 {
  function isValidSignature(bytes32 hash, bytes memory signature) external view returns (bytes4);
}

contract Permit2 {
  struct TokenPermissions {
    address token;
    uint256 amount;
  }

  struct PermitTransferFrom {
    TokenPermissions permitted;
    uint256 nonce;
    uint256 deadline;
  }

  struct SignatureTransferDetails {
    address to;
    uint256 requestedAmount;
  }

  error InvalidAmount(uint256 maxAmount);
  error SignatureExpired(uint256 signatureDeadline);
  error InvalidNonce();
  error InvalidSignatureLength();
  error InvalidSignature();
  error InvalidSigner();
  error InvalidContractSignature();

  event UnorderedNonceInvalidation(address indexed owner, uint256 word, uint256 mask);

  bytes32 private constant _TYPE_HASH = keccak256('EIP712Domain(string name,uint256 chainId,address verifyingContract)');
  bytes32 private constant _HASHED_NAME = keccak256('Permit2');
  bytes32 public constant _TOKEN_PERMISSIONS_TYPEHASH = keccak256('TokenPermissions(address token,uint256 amount)');
  bytes32 public constant _PERMIT_TRANSFER_FROM_TYPEHASH =
    keccak256(
      'PermitTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline)TokenPermissions(address token,uint256 amount)'
    );
  string public constant _PERMIT_TRANSFER_FROM_WITNESS_TYPEHASH_STUB =
    'PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,';
  bytes32 private constant _UPPER_BIT_MASK = 0x7fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff;

  /// owner => word position => bitmap of used nonces (nonce = word << 8 | bit), as in the canonical contract.
  mapping(address => mapping(uint256 => uint256)) public nonceBitmap;

  function DOMAIN_SEPARATOR() public view returns (bytes32) {
    return keccak256(abi.encode(_TYPE_HASH, _HASHED_NAME, block.chainid, address(this)));
  }

  function permitTransferFrom(
    PermitTransferFrom calldata permit,
    SignatureTransferDetails calldata transferDetails,
    address owner,
    bytes calldata signature
  ) external {
    bytes32 tokenPermissions = keccak256(abi.encode(_TOKEN_PERMISSIONS_TYPEHASH, permit.permitted));
    bytes32 dataHash = keccak256(
      abi.encode(_PERMIT_TRANSFER_FROM_TYPEHASH, tokenPermissions, msg.sender, permit.nonce, permit.deadline)
    );
    _permitTransferFrom(permit, transferDetails, owner, dataHash, signature);
  }

  /// The witness is the caller's own struct hash; its type string completes the EIP-712 type, so the payer's
  /// signature covers it (the x402 upto proxy binds recipient, facilitator and validAfter this way).
  function permitWitnessTransferFrom(
    PermitTransferFrom calldata permit,
    SignatureTransferDetails calldata transferDetails,
    address owner,
    bytes32 witness,
    string calldata witnessTypeString,
    bytes calldata signature
  ) external {
    bytes32 typeHash = keccak256(abi.encodePacked(_PERMIT_TRANSFER_FROM_WITNESS_TYPEHASH_STUB, witnessTypeString));
    bytes32 tokenPermissions = keccak256(abi.encode(_TOKEN_PERMISSIONS_TYPEHASH, permit.permitted));
    bytes32 dataHash = keccak256(
      abi.encode(typeHash, tokenPermissions, msg.sender, permit.nonce, permit.deadline, witness)
    );
    _permitTransferFrom(permit, transferDetails, owner, dataHash, signature);
  }

  function invalidateUnorderedNonces(uint256 wordPos, uint256 mask) external {
    nonceBitmap[msg.sender][wordPos] |= mask;
    emit UnorderedNonceInvalidation(msg.sender, wordPos, mask);
  }

  function _permitTransferFrom(
    PermitTransferFrom calldata permit,
    SignatureTransferDetails calldata transferDetails,
    address owner,
    bytes32 dataHash,
    bytes calldata signature
  ) private {
    uint256 requestedAmount = transferDetails.requestedAmount;
    if (block.timestamp > permit.deadline) revert SignatureExpired(permit.deadline);
    if (requestedAmount > permit.permitted.amount) revert InvalidAmount(permit.permitted.amount);
    _useUnorderedNonce(owner, permit.nonce);
    _verify(signature, keccak256(abi.encodePacked('\x19\x01', DOMAIN_SEPARATOR(), dataHash)), owner);
    _safeTransferFrom(permit.permitted.token, owner, transferDetails.to, requestedAmount);
  }

  function _useUnorderedNonce(address from, uint256 nonce) private {
    uint256 wordPos = uint248(nonce >> 8);
    uint256 bit = 1 << uint8(nonce);
    uint256 flipped = nonceBitmap[from][wordPos] ^= bit;
    if (flipped & bit == 0) revert InvalidNonce();
  }

  /// An EOA's 65-byte or EIP-2098 64-byte signature by ecrecover; a contract owner's by EIP-1271.
  function _verify(bytes calldata signature, bytes32 hash, address claimedSigner) private view {
    if (claimedSigner.code.length == 0) {
      bytes32 r;
      bytes32 s;
      uint8 v;
      if (signature.length == 65) {
        r = bytes32(signature[0:32]);
        s = bytes32(signature[32:64]);
        v = uint8(signature[64]);
      } else if (signature.length == 64) {
        r = bytes32(signature[0:32]);
        bytes32 vs = bytes32(signature[32:64]);
        s = vs & _UPPER_BIT_MASK;
        v = uint8(uint256(vs >> 255)) + 27;
      } else {
        revert InvalidSignatureLength();
      }
      address signer = ecrecover(hash, v, r, s);
      if (signer == address(0)) revert InvalidSignature();
      if (signer != claimedSigner) revert InvalidSigner();
    } else {
      bytes4 magic = IERC1271(claimedSigner).isValidSignature(hash, signature);
      if (magic != IERC1271.isValidSignature.selector) revert InvalidContractSignature();
    }
  }

  /// Solmate's safeTransferFrom semantics: a token that returns nothing counts as success, false as failure.
  function _safeTransferFrom(address token, address from, address to, uint256 amount) private {
    (bool ok, bytes memory data) = token.call(abi.encodeCall(IERC20Like.transferFrom, (from, to, amount)));
    require(ok && (data.length == 0 || abi.decode(data, (bool))) && token.code.length > 0, 'TRANSFER_FROM_FAILED');
  }
}
