"""The one table of credential-shaped environment names (design §8, issue #11 item 5).

A name in `[sandbox] env_passthrough` that matches a row is refused at config parse: a
command in a sandbox can read its whole environment and, on any arm without the network
axis, send it anywhere. A person who really means to hand a credential to the commands
names it in `[sandbox] credentials` instead; those names are passed, and every result's
statement names them (never their values).

Each row: a shell-style pattern over the upper-cased name, and what it is there to catch.
Patterns are deliberately wide: a refusal costs one line of config, a leak costs the secret.
"""

from __future__ import annotations

import fnmatch

CREDENTIAL_TABLE: tuple[tuple[str, str], ...] = (
    ("*TOKEN*", "API and session tokens: GITHUB_TOKEN, NPM_TOKEN, VAULT_TOKEN"),
    ("*SECRET*", "client secrets: AWS_SECRET_ACCESS_KEY, DJANGO_SECRET"),
    ("*PASSWORD*", "passwords: PGPASSWORD, DB_PASSWORD"),
    ("*PASSWD*", "passwords, the other spelling"),
    ("*PASSPHRASE*", "key passphrases: GPG_PASSPHRASE"),
    ("SSHPASS", "sshpass reads the password from it"),
    ("*_PASS", "SMTP_PASS, FTP_PASS"),
    ("*_PASS_*", "SMTP_PASS_FILE and the like"),
    ("*PGPASS*", "PGPASSFILE points at a password file"),
    ("*_PWD", "MYSQL_PWD (PWD and OLDPWD, the working directories, do not match)"),
    ("*_PAT", "personal access tokens: GH_PAT, ADO_PAT"),
    ("*_PAT_*", "personal access tokens with a suffix"),
    ("*JWT*", "signed identity tokens: CI_JOB_JWT, ACTIONS_ID_TOKEN_REQUEST_*"),
    ("*OIDC*", "OIDC identity tokens and their request URLs"),
    ("*_KEY", "keys: SSH_KEY, STRIPE_KEY"),
    ("*_KEY_*", "keys with a suffix: AWS_ACCESS_KEY_ID"),
    ("*APIKEY*", "API keys"),
    ("*API_KEY*", "API keys"),
    ("*ACCESS_KEY*", "cloud access keys"),
    ("*PRIVATE*", "private keys"),
    ("*CREDENTIAL*", "credential files: GOOGLE_APPLICATION_CREDENTIALS"),
    ("*CREDS*", "credential files, short"),
    ("*AUTH*", "auth material: NPM_CONFIG__AUTH, SSH_AUTH_SOCK, DOCKER_AUTH_CONFIG"),
    ("*SESSION*", "session ids"),
    ("*COOKIE*", "cookies"),
    ("*SIGNING*", "signing keys"),
    ("*WEBHOOK*", "webhook URLs carry their secret in the URL"),
    ("*DATABASE_URL*", "connection URLs carry user:password@"),
    ("*DB_URL*", "connection URLs carry user:password@"),
    ("*REDIS_URL*", "connection URLs carry user:password@"),
    ("*MONGO*URI*", "connection URIs carry user:password@"),
    ("*MONGO*URL*", "connection URLs carry user:password@"),
    ("*AMQP_URL*", "connection URLs carry user:password@"),
    ("*_DSN", "DSNs carry a key or a password: SENTRY_DSN, DB_DSN"),
    ("*CONNECTION_STRING*", "connection strings carry a password"),
    ("*CONN_STR*", "connection strings carry a password"),
    ("KUBECONFIG", "points at cluster credentials"),
    ("DOCKER_CONFIG", "points at registry credentials (config.json)"),
    ("*NETRC*", "points at machine passwords"),
    ("GPG_AGENT_INFO", "reaches the gpg agent's keys"),
    # Issue 30: each grants access or runs a program of the command's choosing on the host's
    # behalf, though none holds a secret in its value.
    ("KRB5CCNAME", "points at the Kerberos ticket cache: the tickets act as the person"),
    ("*KRB5*", "Kerberos credential and keytab locations: KRB5_KTNAME, KRB5_CLIENT_KTNAME"),
    ("DOCKER_HOST", "reaches a docker daemon: root on its machine"),
    ("CONTAINER_HOST", "reaches a podman service: the same as DOCKER_HOST"),
    ("*ASKPASS*", "GIT_ASKPASS, SSH_ASKPASS, SUDO_ASKPASS: a program asked for a password"),
    # attack3: the siblings of those rows, still accepted after issue 30.
    ("DOCKER_CERT_PATH", "the docker daemon's TLS client key: what DOCKER_HOST needs to be root"),
    ("CONTAINER_SSHKEY", "the ssh key podman's remote client (CONTAINER_HOST) logs in with"),
    ("GIT_SSH*", "GIT_SSH, GIT_SSH_COMMAND: a program git runs for ssh, its -i naming a key"),
    (
        "GIT_CONFIG_*",
        "GIT_CONFIG_PARAMETERS/_COUNT/_KEY_n/_VALUE_n/_GLOBAL set any git config:"
        " http.extraHeader carries Authorization, credential.helper runs a program",
    ),
    ("*IPC_HANDLE*", "VSCODE_GIT_IPC_HANDLE: the editor's socket answering git's password asks"),
    ("GNUPGHOME", "gpg's directory of private keys"),
    ("CLOUDSDK_CONFIG", "gcloud's directory of credentials"),
    ("AZURE_CONFIG_DIR", "az's directory of tokens"),
    ("GH_CONFIG_DIR", "gh's directory: hosts.yml holds the token"),
    ("AWS_CONFIG_FILE", "aws profiles: credential_process runs a program, sso caches tokens"),
    ("BOTO_CONFIG", "boto's file of keys"),
    ("RCLONE_CONFIG", "rclone's remotes and their tokens"),
    ("TF_CLI_CONFIG_FILE", "terraform's credentials blocks"),
    ("NPM_CONFIG_USERCONFIG", "an .npmrc: _authToken"),
    ("*INDEX_URL*", "package index URLs carry user:password@: PIP_INDEX_URL, UV_INDEX_URL"),
)


def credential_pattern(name: str) -> str | None:
    """The first table pattern `name` matches, or None."""
    upper = name.upper()
    for pattern, _why in CREDENTIAL_TABLE:
        if fnmatch.fnmatchcase(upper, pattern):
            return pattern
    return None


def credential_shaped(name: str) -> bool:
    return credential_pattern(name) is not None


def why(pattern: str) -> str:
    return dict(CREDENTIAL_TABLE)[pattern]


def passed_on_purpose(names: list[str]) -> str | None:
    """The sentence every result's statement carries when credentials were handed in."""
    if not names:
        return None
    return (
        f"CREDENTIALS PASSED IN ON PURPOSE ([sandbox] credentials): {', '.join(sorted(names))}"
        " -- the command can read them"
        " and, wherever the network axis is not kept, send them anywhere."
    )
