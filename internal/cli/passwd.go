package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/pgshard/pgshard/proxy"
)

func newPasswdCmd() *cobra.Command {
	var asYAML bool
	cmd := &cobra.Command{
		Use:   "passwd USER",
		Short: "Print a SCRAM-SHA-256 verifier for a proxy user's password",
		Long: `Read a password and print its SCRAM-SHA-256 verifier, in PostgreSQL's
pg_authid format (SCRAM-SHA-256$4096:salt$StoredKey:ServerKey), for
proxy.users[].password: the proxy authenticates clients against it and never
needs the password itself. A plain-text password in the config is accepted
too, with a warning at every start and reload.

The password is the first line of standard input; on a terminal it is asked
for twice without echo. A new random salt is used each time.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().BoolVar(&asYAML, "yaml", false, "print a proxy.users entry: - {name: USER, password: \"...\"}")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		user := args[0]
		if user == "" {
			return usagef("the user name is empty")
		}
		pw, err := readPassword(cmd.InOrStdin(), cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		v, err := proxy.NewSCRAMVerifier(pw)
		if err != nil {
			return fmt.Errorf("passwd: %w", err)
		}
		if asYAML {
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "- {name: %s, password: %s}\n", strconv.Quote(user), strconv.Quote(v))
		} else {
			_, err = fmt.Fprintln(cmd.OutOrStdout(), v)
		}
		return err
	}
	return cmd
}

// readPassword reads one password: from a terminal twice without echo
// (they must match), else the first line of in.
func readPassword(in io.Reader, prompt io.Writer) (string, error) {
	if f, ok := in.(*os.File); ok {
		if old, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			noEcho := *old
			noEcho.Lflag &^= unix.ECHO
			if err := unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, &noEcho); err != nil {
				return "", fmt.Errorf("passwd: turn off echo: %w", err)
			}
			defer func() { _ = unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, old) }()
			rd := bufio.NewReader(f)
			fmt.Fprint(prompt, "Password: ")
			a, err := readLine(rd)
			fmt.Fprintln(prompt)
			if err != nil {
				return "", err
			}
			fmt.Fprint(prompt, "Again: ")
			b, err := readLine(rd)
			fmt.Fprintln(prompt)
			if err != nil {
				return "", err
			}
			if a != b {
				return "", errors.New("passwd: the passwords differ")
			}
			return checkPassword(a)
		}
	}
	line, err := readLine(bufio.NewReader(in))
	if err != nil {
		return "", err
	}
	return checkPassword(line)
}

func readLine(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		if errors.Is(err, io.EOF) {
			return "", errors.New("passwd: no password on standard input")
		}
		return "", fmt.Errorf("passwd: read the password: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func checkPassword(pw string) (string, error) {
	if pw == "" {
		return "", errors.New("passwd: the password is empty")
	}
	return pw, nil
}
