/// The release every binary of this package reports with `--version`.
public enum Release {
    public static let version = "0.1.0"
}
